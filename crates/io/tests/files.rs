//! Opening files: O_DIRECT refusal on tmpfs, alignment discovery, the data
//! directory lock, option ranges, many files on shared threads.

// Helpers outside #[test] functions unwrap too: a failure is a test failure.
#![allow(clippy::unwrap_used)]

use std::path::Path;

use barracuda_io::{
    Backend, CompletionQueue, DirLock, FlushMethod, IoError, IoOptions, IoRequest, IoThreads,
};

fn scratch_dir() -> tempfile::TempDir {
    tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap()
}

#[test]
fn odirect_on_tmpfs_names_the_path_and_suggests_fsync() {
    let shm = Path::new("/dev/shm");
    if !shm.is_dir() {
        eprintln!("skipped: no /dev/shm on this machine");
        return;
    }
    let dir = tempfile::tempdir_in(shm).unwrap();
    let path = dir.path().join("data");
    for backend in [Backend::Uring, Backend::Pread] {
        for method in [FlushMethod::ODirect, FlushMethod::ODirectNoFsync] {
            let options = IoOptions::default().backend(backend).flush_method(method);
            let error = barracuda_io::open(&path, &options).unwrap_err();
            assert!(
                matches!(error, IoError::DirectIoUnsupported { .. }),
                "{error:?}"
            );
            let message = error.to_string();
            assert!(message.contains(&path.display().to_string()), "{message}");
            assert!(message.contains("FlushMethod::Fsync"), "{message}");
        }
    }
    // The suggested alternative works there.
    let options = IoOptions::default().flush_method(FlushMethod::Fsync);
    let file = barracuda_io::open(&path, &options).unwrap();
    let buf = file.alloc_buf(4096);
    file.write_at(0, &buf).unwrap();
    file.sync_data().unwrap();
}

#[test]
fn alignment_is_at_least_a_sector() {
    let dir = scratch_dir();
    let file = barracuda_io::open(&dir.path().join("data"), &IoOptions::default()).unwrap();
    let alignment = file.alignment();
    assert!(alignment.offset_bytes >= 512 && alignment.offset_bytes.is_power_of_two());
    assert!(alignment.mem_bytes >= 512 && alignment.mem_bytes.is_power_of_two());
    let buf = file.alloc_buf(4096);
    assert_eq!(buf.addr() % alignment.mem_bytes, 0);
}

#[test]
fn dir_lock_is_exclusive_and_released_on_drop() {
    let dir = scratch_dir();
    let first = DirLock::acquire(dir.path()).unwrap();
    assert_eq!(first.dir(), dir.path());
    // A second open file description conflicts, as another process would,
    // and the error says the holder is this process.
    let error = DirLock::acquire(dir.path()).unwrap_err();
    assert!(
        matches!(error, IoError::DirOpenInProcess { .. }),
        "{error:?}"
    );
    assert!(error.to_string().contains("this process"), "{error}");
    let shared = DirLock::acquire_shared(dir.path()).unwrap_err();
    assert!(
        matches!(shared, IoError::DirOpenInProcess { .. }),
        "{shared:?}"
    );
    assert!(
        error
            .to_string()
            .contains(&dir.path().display().to_string())
    );
    drop(first);
    let _again = DirLock::acquire(dir.path()).unwrap();
}

#[test]
fn dir_lock_conflicts_with_another_process() {
    let dir = scratch_dir();
    let _held = DirLock::acquire(dir.path()).unwrap();
    let lock_path = dir.path().join(barracuda_io::LOCK_FILE_NAME);
    // util-linux flock(1): -n fails at once (exit 1) if the lock is held.
    let status = std::process::Command::new("flock")
        .arg("-n")
        .arg(&lock_path)
        .arg("true")
        .status();
    match status {
        Ok(status) => assert_eq!(status.code(), Some(1), "the child must see the lock held"),
        Err(e) => eprintln!("skipped the child-process half: no flock(1): {e}"),
    }
}

#[test]
fn missing_dir_is_a_lock_error_naming_it() {
    let error = DirLock::acquire(Path::new("/nonexistent/barracuda")).unwrap_err();
    assert!(matches!(error, IoError::Lock { .. }));
    assert!(error.to_string().contains("/nonexistent/barracuda"));
}

#[test]
fn option_ranges_are_checked() {
    let dir = scratch_dir();
    let path = dir.path().join("data");
    for options in [
        IoOptions::default().read_io_threads(0),
        IoOptions::default().read_io_threads(65),
        IoOptions::default().write_io_threads(0),
        IoOptions::default().queue_depth(0),
        IoOptions::default().buffer_size_bytes(1000),
    ] {
        let error = barracuda_io::open(&path, &options).unwrap_err();
        assert!(matches!(error, IoError::InvalidOptions { .. }), "{error:?}");
    }
    barracuda_io::open(
        &path,
        &IoOptions::default().read_io_threads(64).write_io_threads(1),
    )
    .unwrap();
}

#[test]
fn no_create_on_missing_file_is_an_open_error() {
    let dir = scratch_dir();
    let path = dir.path().join("absent");
    let error = barracuda_io::open(&path, &IoOptions::default().create(false)).unwrap_err();
    assert!(matches!(error, IoError::Os { .. }), "{error:?}");
    assert!(error.to_string().contains("absent"));
}

#[test]
fn data_survives_reopen_with_every_flush_method() {
    let dir = scratch_dir();
    let path = dir.path().join("data");
    for method in [
        FlushMethod::Fsync,
        FlushMethod::ODsync,
        FlushMethod::ODirect,
        FlushMethod::ODirectNoFsync,
    ] {
        let options = IoOptions::default().flush_method(method);
        {
            let file = barracuda_io::open(&path, &options).unwrap();
            let mut buf = file.alloc_buf(8192);
            buf.fill(method as u8 + 1);
            file.write_at(8192, &buf).unwrap();
            file.sync_data().unwrap();
        }
        let file = barracuda_io::open(&path, &options).unwrap();
        let mut back = file.alloc_buf(8192);
        file.read_at(8192, &mut back).unwrap();
        assert!(back.iter().all(|&b| b == method as u8 + 1), "{method:?}");
    }
}

/// `read_if_cached` reads only what the page cache holds, `uncache` drops
/// the clean pages of a range, and neither does anything under `O_DIRECT`.
#[test]
fn read_if_cached_sees_only_the_page_cache() {
    let dir = scratch_dir();
    if is_tmpfs(dir.path()) {
        // tmpfs files are their page cache: nothing can be dropped.
        eprintln!("skipped: the scratch directory is on tmpfs");
        return;
    }
    for backend in [Backend::Uring, Backend::Pread] {
        let path = dir.path().join(format!("buffered-{backend:?}"));
        let options = IoOptions::default()
            .backend(backend)
            .flush_method(FlushMethod::Fsync);
        let file = barracuda_io::open(&path, &options).unwrap();
        let mut data = file.alloc_buf(8192);
        data.fill(0x5a);
        file.write_at(0, &data).unwrap();
        file.sync_data().unwrap();
        let mut back = file.alloc_buf(8192);
        // Written through the page cache: there.
        assert!(file.read_if_cached(0, &mut back).unwrap(), "{backend:?}");
        assert_eq!(&back[..], &data[..]);
        // Clean after the sync, so dropped; a read brings it back. The
        // kernel may still hold a page a moment (on another CPU's LRU
        // batch, or finishing its writeback under load): dropping it again
        // until it goes, for up to ten seconds, is not a race.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            file.uncache(0, 8192).unwrap();
            if !file.read_if_cached(0, &mut back).unwrap() {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{backend:?}: still cached after uncache"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        file.read_at(0, &mut back).unwrap();
        back.fill(0);
        assert!(file.read_if_cached(0, &mut back).unwrap(), "{backend:?}");
        assert_eq!(&back[..], &data[..]);
        // Past the end is not cached either.
        assert!(!file.read_if_cached(1 << 20, &mut back).unwrap());

        let direct = dir.path().join(format!("direct-{backend:?}"));
        let options = IoOptions::default().backend(backend);
        let file = barracuda_io::open(&direct, &options).unwrap();
        file.write_at(0, &data).unwrap();
        file.sync_data().unwrap();
        file.read_at(0, &mut back).unwrap();
        assert!(!file.read_if_cached(0, &mut back).unwrap(), "{backend:?}");
        file.uncache(0, 8192).unwrap();
    }
}

fn is_tmpfs(path: &Path) -> bool {
    std::process::Command::new("stat")
        .args(["-f", "-c", "%T"])
        .arg(path)
        .output()
        .is_ok_and(|out| String::from_utf8_lossy(&out.stdout).trim() == "tmpfs")
}

/// Many files on one set of threads: every byte written through one
/// file's batch and `write_at` reads back from that file alone, and
/// dropping some files leaves the others served.
#[test]
fn many_files_share_one_set_of_threads() {
    for backend in [Backend::Auto, Backend::Pread] {
        let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        let options = IoOptions::default()
            .backend(backend)
            .read_io_threads(2)
            .write_io_threads(2)
            .buffer_count(8);
        let threads = IoThreads::start(dir.path(), &options).unwrap();
        assert_eq!(threads.thread_count(), 4);
        let file_options = options.clone().threads(threads.clone());
        let mut files: Vec<_> = (0..40)
            .map(|i| barracuda_io::open(&dir.path().join(format!("f{i}")), &file_options).unwrap())
            .collect();
        for (i, file) in files.iter().enumerate() {
            let mut buf = file.alloc_buf(4096);
            buf.fill(i as u8);
            file.write_at(0, &buf).unwrap();
            let queue = CompletionQueue::new();
            let mut batch = file.alloc_buf(8192);
            batch.fill(!(i as u8));
            file.submit(vec![IoRequest::write(4096, batch, 0)], &queue.sender());
            queue.wait().result.unwrap();
        }
        files.drain(..20);
        for (i, file) in files.iter().enumerate() {
            let fill = (i + 20) as u8;
            let mut back = file.alloc_buf(12288);
            file.read_at(0, &mut back).unwrap();
            assert!(back[..4096].iter().all(|&b| b == fill), "file {}", i + 20);
            assert!(back[4096..].iter().all(|&b| b == !fill), "file {}", i + 20);
        }
        assert_eq!(threads.free_buffer_count(), 8, "every buffer came back");
    }
}
