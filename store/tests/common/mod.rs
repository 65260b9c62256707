//! Helpers shared by the integration tests.
#![allow(dead_code)]

pub mod frames;
pub mod http_server;
pub mod models;
