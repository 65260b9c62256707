//! Writes `ui/src/lib/bindings.ts` (or the path given as the first argument).

fn main() -> anyhow::Result<()> {
    let path = std::env::args_os().nth(1).map(std::path::PathBuf::from).unwrap_or_else(unmask_app_lib::bindings::default_path);
    unmask_app_lib::bindings::export(&path)?;
    println!("wrote {}", path.display());
    Ok(())
}
