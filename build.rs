//! Rebuilds the crate when a migration or Lua script changes (both are compiled in).
fn main() {
    println!("cargo:rerun-if-changed=migrations");
    println!("cargo:rerun-if-changed=lua");
}
