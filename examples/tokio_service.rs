//! Using the store from a tokio service: request handlers on a single-
//! threaded runtime share one database, each awaiting its reads and
//! durable writes, while a heartbeat task keeps running on the same thread.
//!
//! ```sh
//! cargo run --release --features tokio --example tokio_service [-- DIR]
//! ```

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use barracuda::Db;
use barracuda::asynchronous::{AsyncDb, AsyncTree};

/// Concurrent clients, and requests each sends.
const CLIENT_COUNT: u64 = 8;
const REQUESTS_PER_CLIENT: u64 = 25;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let temp;
    let dir: PathBuf = match std::env::args_os().nth(1) {
        Some(path) => path.into(),
        None => {
            temp = tempfile::tempdir_in(".")?;
            temp.path().join("db")
        }
    };
    println!("service database in {}", dir.display());
    let db = AsyncDb::open(Db::options().buffer_pool_bytes(8 << 20), dir).await?;
    let requests = db.tree("requests").await?;

    let beats = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let heartbeat = tokio::spawn({
        let (beats, stop) = (Arc::clone(&beats), Arc::clone(&stop));
        async move {
            let mut interval = tokio::time::interval(Duration::from_millis(5));
            while !stop.load(Ordering::Relaxed) {
                interval.tick().await;
                beats.fetch_add(1, Ordering::Relaxed);
            }
        }
    });

    let started = Instant::now();
    let mut clients = Vec::new();
    for client in 0..CLIENT_COUNT {
        clients.push(tokio::spawn(handle_client(requests.clone(), client)));
    }
    let mut served = 0;
    for client in clients {
        served += client.await??;
    }
    let elapsed = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    heartbeat.await?;
    println!(
        "served {served} requests (each a durable put and a get) from {CLIENT_COUNT} clients in {} ms",
        elapsed.as_millis()
    );
    println!(
        "the heartbeat beat {} times meanwhile on the same thread: no handler blocked it",
        beats.load(Ordering::Relaxed)
    );
    let all = requests.range_collect::<&[u8], _>(..).await?;
    println!(
        "{} requests stored; first: {:?}",
        all.len(),
        all.first().map(|(k, _)| String::from_utf8_lossy(k))
    );
    db.close().await?;
    Ok(())
}

/// One client: stores each request (a durable put) and reads it back.
async fn handle_client(requests: AsyncTree, client: u64) -> barracuda::Result<u64> {
    for request in 0..REQUESTS_PER_CLIENT {
        let key = format!("client{client:02}/req{request:03}");
        let value = format!("{{\"client\": {client}, \"request\": {request}}}");
        requests.put(key.as_bytes(), value.as_bytes()).await?;
        let read = requests.get(key.as_bytes()).await?;
        assert_eq!(read.as_deref(), Some(value.as_bytes()), "read your write");
    }
    Ok(REQUESTS_PER_CLIENT)
}
