//! Raw FFI surface: `#[repr(C)]` types, constants and the interface function table.
//! Dependency-free so the mock provider shares it by `#[path]` inclusion.
#![allow(non_camel_case_types, non_snake_case, non_upper_case_globals, dead_code)]

pub mod table;
pub mod types;

pub use table::*;
pub use types::*;
