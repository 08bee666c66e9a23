//! A basic key-value store: open a database, put, get, delete and scan one
//! tree, close, reopen and find the data again.
//!
//! ```sh
//! cargo run --release --example basic            # in a temporary directory under .
//! cargo run --release --example basic -- ./mydb  # in ./mydb (kept)
//! ```

use std::path::PathBuf;

use barracuda::{Db, FlushMethod};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // A path argument, or a temporary directory under the current one
    // (not /tmp, which is often tmpfs, where O_DIRECT is refused).
    let temp;
    let dir: PathBuf = match std::env::args_os().nth(1) {
        Some(path) => path.into(),
        None => {
            temp = tempfile::tempdir_in(".")?;
            temp.path().join("db")
        }
    };
    println!("opening a database in {}", dir.display());
    let db = open(&dir)?;
    let fruit = db.tree("fruit")?;
    for (name, color) in [("apple", "red"), ("banana", "yellow"), ("cherry", "red")] {
        fruit.put(name.as_bytes(), color.as_bytes())?;
        println!("put {name} = {color}");
    }
    let apple = fruit.get(b"apple")?;
    println!(
        "get apple -> {:?}",
        apple.as_deref().map(String::from_utf8_lossy)
    );
    let existed = fruit.delete(b"banana")?;
    println!("delete banana -> existed: {existed}");
    println!("every entry, in key order:");
    for entry in fruit.iter() {
        let (key, value) = entry?;
        println!(
            "  {} = {}",
            String::from_utf8_lossy(&key),
            String::from_utf8_lossy(&value)
        );
    }
    db.close()?;
    println!("closed; reopening");
    let db = open(&dir)?;
    let fruit = db.open_tree("fruit")?;
    let cherry = fruit.get(b"cherry")?;
    println!(
        "after reopening: cherry -> {:?}, {} entries",
        cherry.as_deref().map(String::from_utf8_lossy),
        fruit.iter().count()
    );
    db.check()?;
    println!("check: OK");
    db.close()?;
    Ok(())
}

/// Opens `dir` with O_DIRECT, or with buffered I/O and fsync where the
/// filesystem refuses O_DIRECT (tmpfs).
fn open(dir: &std::path::Path) -> barracuda::Result<Db> {
    match Db::options().buffer_pool_bytes(8 << 20).open(dir) {
        Err(barracuda::Error::DirectIoUnsupported { .. }) => Db::options()
            .buffer_pool_bytes(8 << 20)
            .flush_method(FlushMethod::Fsync)
            .open(dir),
        other => other,
    }
}
