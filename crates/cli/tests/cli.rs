//! The command line as a newcomer meets it: numbers out of range refused
//! with their range (exit status 2), text keys and values, errors printed
//! once without a backtrace unless asked, read-only inspection commands
//! that change no file, and `--wait` for the lock.

#![allow(clippy::unwrap_used, reason = "tests may unwrap")]
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, SystemTime};

fn tempdir() -> tempfile::TempDir {
    // Under target/: an ext4 filesystem where O_DIRECT works (not tmpfs).
    tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap()
}

fn command(args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_barracuda"));
    command
        .args(args)
        .env_remove("BARRACUDA_BACKTRACE")
        .env_remove("RUST_LIB_BACKTRACE");
    command
}

fn barracuda(args: &[&str]) -> Output {
    command(args).output().unwrap()
}

fn stdout(output: &Output) -> String {
    String::from_utf8(output.stdout.clone()).unwrap()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn ok(args: &[&str]) -> String {
    let output = barracuda(args);
    assert!(output.status.success(), "{args:?}: {}", stderr(&output));
    stdout(&output)
}

#[test]
fn numbers_out_of_range_exit_2_naming_the_range() {
    let dir = tempdir();
    let db = dir.path().join("db");
    let db = db.to_str().unwrap();
    // (arguments, the range the message must name)
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["load", db, "--ops", "-", "--batch", "18446744073709551615"],
            "1..=1000000",
        ),
        (
            vec!["load", db, "--ops", "-", "--batch", "0"],
            "1..=1000000",
        ),
        (vec!["get", db, "t", "k", "--pool-mib", "0"], "1..=1048576"),
    ];
    for (args, range) in cases {
        let output = barracuda(&args);
        assert_eq!(
            output.status.code(),
            Some(2),
            "{args:?}: {}",
            stderr(&output)
        );
        let message = stderr(&output);
        assert!(message.contains(range), "{args:?}: {message}");
        assert!(stdout(&output).is_empty(), "{args:?}");
    }
    assert!(!dir.path().join("db").exists(), "nothing created");
}

#[test]
fn text_keys_and_values_round_trip() {
    let dir = tempdir();
    let db = dir.path().join("db");
    let db = db.to_str().unwrap();
    assert_eq!(
        ok(&["put", db, "t", "carol", r#"{"age":22}"#]),
        "inserted\n"
    );
    assert_eq!(ok(&["get", db, "t", "carol"]), "{\"age\":22}\n");
    // A text key that looks like hex is text; `0x` asks for hex.
    ok(&["put", db, "t", "cafe", "text"]);
    ok(&["put", db, "t", "0xcafe", "0xff00"]);
    assert_eq!(ok(&["get", db, "t", "cafe"]), "text\n");
    assert_eq!(ok(&["get", db, "t", "0xcafe"]), "0xff00\n");
    assert_eq!(ok(&["get", db, "t", "--hex", "cafe"]), "ff00\n");
    // Non-ASCII text prints as itself.
    ok(&["put", db, "t", "clé", "日本"]);
    assert_eq!(ok(&["get", db, "t", "clé"]), "日本\n");
    // A dump reads back through load as the same entries.
    let dump = ok(&["dump", db]);
    assert!(dump.contains("t carol {\"age\":22}\n"), "{dump}");
    assert!(dump.contains("t 0xcafe 0xff00\n"), "{dump}");
    let file = dir.path().join("dump.txt");
    let lines: String = dump.lines().map(|l| format!("put {l}\n")).collect();
    std::fs::write(&file, lines).unwrap();
    let copy = dir.path().join("copy");
    let copy = copy.to_str().unwrap();
    ok(&["load", copy, "--ops", file.to_str().unwrap(), "--chunked"]);
    assert_eq!(ok(&["dump", copy]), dump);
}

#[test]
fn errors_print_once_without_a_backtrace_unless_asked() {
    let dir = tempdir();
    let db = dir.path().join("db");
    let db = db.to_str().unwrap();
    ok(&["put", db, "t", "k", "v"]);
    for (variable, flag, backtrace) in [
        (None, false, false),
        (Some(("RUST_BACKTRACE", "1")), false, false),
        (Some(("BARRACUDA_BACKTRACE", "1")), false, true),
        (None, true, true),
    ] {
        let mut args = vec!["get", db, "t", "missing"];
        if flag {
            args.insert(0, "-v");
        }
        let mut command = command(&args);
        if let Some((name, value)) = variable {
            command.env(name, value);
        }
        let output = command.output().unwrap();
        assert_eq!(output.status.code(), Some(1));
        let message = stderr(&output);
        assert_eq!(message.matches("not found").count(), 1, "{message}");
        assert!(message.starts_with("error: not found"), "{message}");
        assert_eq!(
            message.contains("backtrace"),
            backtrace,
            "{variable:?} {flag}: {message}"
        );
    }
    // A chain prints each distinct cause once.
    let output = barracuda(&["stat", dir.path().join("nothing").to_str().unwrap()]);
    let message = stderr(&output);
    assert_eq!(message.lines().count(), 1, "{message}");
}

/// Every file under `dir` with its bytes and modification time.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, (Vec<u8>, SystemTime)> {
    let mut files = BTreeMap::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let modified = std::fs::metadata(&path).unwrap().modified().unwrap();
        files.insert(path.clone(), (std::fs::read(&path).unwrap(), modified));
    }
    files
}

#[test]
fn inspection_commands_change_no_file() {
    let dir = tempdir();
    let db = dir.path().join("db");
    let db_str = db.to_str().unwrap();
    let ops: String = (0..2000)
        .map(|i| {
            format!(
                "put t{} key{i:05} value-{i}-{}\n",
                i % 3,
                "x".repeat(i % 50)
            )
        })
        .collect();
    let file = dir.path().join("ops.txt");
    std::fs::write(&file, ops).unwrap();
    ok(&[
        "load",
        db_str,
        "--ops",
        file.to_str().unwrap(),
        "--batch",
        "500",
    ]);
    let before = snapshot(&db);
    assert!(before.len() > 3, "{before:?}");
    // mtimes have a resolution: let a write show as a change.
    std::thread::sleep(Duration::from_millis(20));
    for args in [
        vec!["stat", db_str],
        vec!["stat", db_str, "--json"],
        vec!["check", db_str],
        vec!["dump", db_str],
        vec!["get", db_str, "t1", "key00001"],
    ] {
        ok(&args);
        assert!(snapshot(&db) == before, "{args:?} changed a file");
    }
}

#[test]
fn concurrent_writers_wait_for_the_lock() {
    let dir = tempdir();
    let db = dir.path().join("db");
    let db = db.to_str().unwrap();
    ok(&["put", db, "t", "first", "1"]);
    for writers in [4, 8] {
        let children: Vec<_> = (0..writers)
            .map(|i| {
                command(&["put", db, "t", &format!("w{writers}-{i}"), "v", "--wait"])
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for child in children {
            let output = child.wait_with_output().unwrap();
            assert!(output.status.success(), "{}", stderr(&output));
        }
        let dump = ok(&["dump", db, "--wait"]);
        for i in 0..writers {
            assert!(dump.contains(&format!("t w{writers}-{i} v\n")), "{dump}");
        }
    }
}

/// A database whose writer was killed: the read-only commands refuse it
/// (if the log still holds changes past the last checkpoint), naming
/// `recover`, and change no file; `recover` replays the log, and then they
/// see every committed write.
#[test]
fn a_killed_writer_leaves_a_database_that_recover_makes_readable() {
    use std::io::{BufRead, BufReader, Write};
    for keys in [1usize, 20] {
        let dir = tempdir();
        let db = dir.path().join("db");
        let db_str = db.to_str().unwrap();
        let mut child = command(&["load", db_str, "--ops", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        for i in 0..keys {
            writeln!(stdin, "put t key{i} value{i}").unwrap();
            stdin.flush().unwrap();
            // Durable once it says so.
            assert_eq!(
                lines.next().unwrap().unwrap(),
                format!("committed {}", i + 1)
            );
        }
        // The writer waits for more input: kill it there.
        child.kill().unwrap();
        child.wait().unwrap();
        let before = snapshot(&db);
        let stat = barracuda(&["stat", db_str]);
        assert!(snapshot(&db) == before, "stat changed a file");
        let recovered = ok(&["recover", db_str]);
        if stat.status.success() {
            // A background checkpoint ran before the kill: nothing to replay.
            assert!(
                recovered.starts_with("recovered: 0 pages replayed"),
                "{recovered}"
            );
        } else {
            assert_eq!(stat.status.code(), Some(1));
            assert!(
                stderr(&stat).contains("barracuda recover"),
                "{}",
                stderr(&stat)
            );
            assert!(!recovered.starts_with("recovered: 0 pages"), "{recovered}");
        }
        for i in 0..keys {
            assert_eq!(
                ok(&["get", db_str, "t", &format!("key{i}")]),
                format!("value{i}\n")
            );
        }
    }
}
