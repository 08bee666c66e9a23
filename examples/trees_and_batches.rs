//! Several trees in one database, each with its own page format, and
//! atomic batches across them: a bank transfer that moves money between
//! two accounts and records it in a ledger, all or nothing.
//!
//! ```sh
//! cargo run --release --example trees_and_batches [-- DIR]
//! ```

use std::path::PathBuf;

use barracuda::{Compression, Db, TreeOptions, WriteBatch};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let temp;
    let dir: PathBuf = match std::env::args_os().nth(1) {
        Some(path) => path.into(),
        None => {
            temp = tempfile::tempdir_in(".")?;
            temp.path().join("db")
        }
    };
    println!("opening a database in {}", dir.display());
    let db = Db::options().buffer_pool_bytes(8 << 20).open(&dir)?;
    // Balances are small and hot: uncompressed 4 KiB pages.
    let accounts = db.create_tree(
        "accounts",
        TreeOptions::default()
            .page_size_bytes(4 << 10)
            .compression(Compression::None),
    )?;
    // The ledger is append-only text: zstd compresses it well.
    let ledger = db.create_tree(
        "ledger",
        TreeOptions::default().compression(Compression::Zstd { level: 3 }),
    )?;
    println!("trees: {:?}", db.tree_names());

    let mut opening = WriteBatch::new();
    opening.put(&accounts, b"alice", &100u64.to_be_bytes());
    opening.put(&accounts, b"bob", &20u64.to_be_bytes());
    db.write(opening)?;
    println!("opened accounts: alice 100, bob 20");

    for (seq, amount) in [(1u64, 30u64), (2, 25)] {
        transfer(&db, &accounts, &ledger, seq, b"alice", b"bob", amount)?;
        println!(
            "transfer {seq}: alice -> bob {amount}; alice {}, bob {}",
            balance(&accounts, b"alice")?,
            balance(&accounts, b"bob")?
        );
    }
    println!("ledger:");
    for entry in ledger.iter() {
        let (key, value) = entry?;
        println!(
            "  {:>3}: {}",
            u64::from_be_bytes(key.as_slice().try_into()?),
            String::from_utf8_lossy(&value)
        );
    }
    db.check()?;
    db.close()?;
    Ok(())
}

/// Moves `amount` from `from` to `to` and logs it, in one atomic batch.
fn transfer(
    db: &Db,
    accounts: &barracuda::Tree,
    ledger: &barracuda::Tree,
    seq: u64,
    from: &[u8],
    to: &[u8],
    amount: u64,
) -> Result<(), Box<dyn std::error::Error>> {
    let from_balance = balance(accounts, from)?;
    let Some(left) = from_balance.checked_sub(amount) else {
        return Err("insufficient funds".into());
    };
    let mut batch = WriteBatch::new();
    batch.put(accounts, from, &left.to_be_bytes());
    batch.put(
        accounts,
        to,
        &(balance(accounts, to)? + amount).to_be_bytes(),
    );
    let note = format!(
        "{} -> {}: {amount}",
        String::from_utf8_lossy(from),
        String::from_utf8_lossy(to)
    );
    batch.put(ledger, &seq.to_be_bytes(), note.as_bytes());
    // Both balances and the ledger line are durable together, or none is.
    db.write(batch)?;
    Ok(())
}

fn balance(accounts: &barracuda::Tree, name: &[u8]) -> Result<u64, Box<dyn std::error::Error>> {
    let value = accounts.get(name)?.ok_or("no such account")?;
    Ok(u64::from_be_bytes(value.as_slice().try_into()?))
}
