//! The admin commands of the built `barracuda` binary: load and dump round
//! trip, get/put/del, check on a healthy and on a damaged database, stat,
//! and refusing directories that hold no database.

#![allow(clippy::unwrap_used, reason = "tests may unwrap")]
use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

fn tempdir() -> tempfile::TempDir {
    // Under target/: an ext4 filesystem where O_DIRECT works (not tmpfs).
    tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap()
}

fn barracuda(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_barracuda"))
        .args(args)
        .output()
        .unwrap()
}

fn stdout(output: &Output) -> String {
    String::from_utf8(output.stdout.clone()).unwrap()
}

/// stdout and stderr together, for messages.
fn text(output: &Output) -> String {
    format!(
        "{}{}",
        stdout(output),
        String::from_utf8_lossy(&output.stderr)
    )
}

fn ok(args: &[&str]) -> String {
    let output = barracuda(args);
    assert!(output.status.success(), "{args:?}: {}", text(&output));
    stdout(&output)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// `count` puts into trees `a` and `b` with values that compress, as
/// `load` lines, and the `dump` lines they must produce.
fn ops(count: usize) -> (String, String) {
    let mut ops = String::new();
    let mut a = Vec::new();
    let mut b = Vec::new();
    for i in 0..count {
        // Text keys; values with spaces, so written (and dumped) in hex.
        let key = format!("key{i:06}");
        let value = format!(
            "0x{}",
            hex(format!("value {i} ").repeat(1 + i % 7).as_bytes())
        );
        let tree = if i % 3 == 0 { "b" } else { "a" };
        ops.push_str(&format!("put {tree} {key} {value}\n"));
        let line = format!("{tree} {key} {value}\n");
        if tree == "a" { &mut a } else { &mut b }.push(line);
    }
    (ops, a.concat() + &b.concat())
}

/// A database path under `dir` (not created yet), an ops file of `n`
/// puts written there, and the dump those puts must give.
fn ops_file(dir: &Path, n: usize) -> (String, String, String) {
    let db = dir.join("db").to_str().unwrap().to_string();
    let (lines, expected) = ops(n);
    let file = dir.join("ops.txt");
    std::fs::write(&file, &lines).unwrap();
    (db, file.to_str().unwrap().to_string(), expected)
}

#[test]
fn load_then_dump_round_trips() {
    let dir = tempdir();
    let (db, file, expected) = ops_file(dir.path(), 500);
    let db = db.as_str();
    let out = ok(&["load", db, "--ops", &file, "--batch", "64"]);
    let commits: Vec<&str> = out.lines().collect();
    assert_eq!(commits.len(), 8, "{out}");
    assert_eq!(commits[0], "committed 64");
    assert_eq!(commits[7], "committed 500");
    assert_eq!(ok(&["dump", db]), expected);
    let only_b: String = expected
        .lines()
        .filter(|l| l.starts_with("b "))
        .map(|l| format!("{l}\n"))
        .collect();
    assert_eq!(ok(&["dump", db, "--tree", "b"]), only_b);
    ok(&["check", db]);
}

/// `load --chunked`: one chunked writer for the whole file, `committed K`
/// once; deletes of a tree's every key leave it empty; a bad line stops
/// the load after the lines before it.
#[test]
fn load_chunked_applies_every_line_and_stops_at_a_bad_one() {
    let dir = tempdir();
    let (db, file, expected) = ops_file(dir.path(), 3000);
    let db = db.as_str();
    assert_eq!(
        ok(&["load", db, "--ops", &file, "--chunked"]),
        "committed 3000\n"
    );
    assert_eq!(ok(&["dump", db]), expected);
    ok(&["check", db]);
    // Delete every key of tree b, in reverse order, then a bad line.
    let deletes: String = (0..3000)
        .rev()
        .filter(|i| i % 3 == 0)
        .map(|i| format!("del b key{i:06}\n"))
        .collect();
    let file = dir.path().join("deletes.txt");
    std::fs::write(
        &file,
        deletes + "del nosuchtree 01\nput a 0xzz 00\nput a 01 01\n",
    )
    .unwrap();
    let output = barracuda(&["load", db, "--ops", file.to_str().unwrap(), "--chunked"]);
    assert!(!output.status.success());
    assert_eq!(stdout(&output), "committed 1001\n");
    assert!(text(&output).contains("line 1002"), "{}", text(&output));
    let only_a: String = expected
        .lines()
        .filter(|l| l.starts_with("a "))
        .map(|l| format!("{l}\n"))
        .collect();
    assert_eq!(ok(&["dump", db]), only_a);
    ok(&["check", db]);
}

#[test]
fn compact_keeps_the_dump_and_checks() {
    let dir = tempdir();
    let (db, file, expected) = ops_file(dir.path(), 2000);
    let db = db.as_str();
    ok(&["load", db, "--ops", &file, "--batch", "100"]);
    let out = ok(&["compact", db, "--tree", "a"]);
    assert!(out.starts_with("tree a: 1333 entries, "), "{out}");
    let out = ok(&["compact", db]);
    assert_eq!(out.lines().count(), 2, "{out}");
    assert_eq!(ok(&["dump", db]), expected);
    ok(&["check", db]);
}

#[test]
fn load_reads_stdin_commits_every_line_and_stops_at_a_bad_line() {
    let dir = tempdir();
    let db = dir.path().join("db");
    let db = db.to_str().unwrap();
    let input = "put t 01 aa\nput t 02 bb\n\n# a comment\ndel t 01\nput t 03 cc\nput t 04 0xzz\nput t 05 ee\n";
    let mut child = Command::new(env!("CARGO_BIN_EXE_barracuda"))
        .args(["load", db, "--ops", "-", "--batch", "2"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(!output.status.success());
    // Lines 1-2 and 5-6 were committed; the batch of line 7 was not.
    assert_eq!(stdout(&output), "committed 2\ncommitted 4\n");
    assert!(text(&output).contains("line 7"), "{}", text(&output));
    assert_eq!(ok(&["dump", db]), "t 02 bb\nt 03 cc\n");
    // --batch 1 (the default) commits and reports every line.
    let file = dir.path().join("ops.txt");
    std::fs::write(&file, "put t 06 ff\nput u 07 0x\ndel nosuchtree 01\n").unwrap();
    let out = ok(&["load", db, "--ops", file.to_str().unwrap()]);
    assert_eq!(out, "committed 1\ncommitted 2\ncommitted 3\n");
    // An empty value: an empty line from get, `0x` in a dump, `-` in hex.
    assert_eq!(ok(&["get", db, "u", "07"]), "\n");
    assert_eq!(ok(&["dump", db, "--tree", "u"]), "u 07 0x\n");
    assert_eq!(ok(&["dump", db, "--tree", "u", "--hex"]), "u 3037 -\n");
}

#[test]
fn get_put_del() {
    let dir = tempdir();
    let db = dir.path().join("db");
    let db = db.to_str().unwrap();
    assert_eq!(
        ok(&["put", db, "users", "0x616c696365", "0x3331"]),
        "inserted\n"
    );
    assert_eq!(
        ok(&["put", db, "users", "--hex", "616c696365", "3332"]),
        "replaced\n"
    );
    assert_eq!(ok(&["put", db, "users", "alice", "32"]), "replaced\n");
    assert_eq!(ok(&["get", db, "users", "0x616c696365"]), "32\n");
    assert_eq!(ok(&["get", db, "users", "--hex", "616c696365"]), "3332\n");
    let missing = barracuda(&["get", db, "users", "bob"]);
    assert_eq!(missing.status.code(), Some(1));
    assert!(text(&missing).contains("not found"), "{}", text(&missing));
    assert_eq!(ok(&["del", db, "users", "alice"]), "deleted\n");
    assert_eq!(ok(&["del", db, "users", "alice"]), "absent\n");
    assert_eq!(
        barracuda(&["get", db, "users", "alice"]).status.code(),
        Some(1)
    );
    let bad = barracuda(&["put", db, "users", "0x6g", "00"]);
    assert_eq!(bad.status.code(), Some(1));
    assert!(text(&bad).contains("hex"), "{}", text(&bad));
}

#[test]
fn commands_refuse_a_directory_without_a_database() {
    let dir = tempdir();
    let empty = dir.path().to_str().unwrap();
    for args in [
        vec!["check", empty],
        vec!["stat", empty],
        vec!["dump", empty],
        vec!["get", empty, "t", "00"],
        vec!["del", empty, "t", "00"],
    ] {
        let output = barracuda(&args);
        assert_eq!(output.status.code(), Some(1), "{args:?}");
        assert!(
            text(&output).contains("not a barracuda database"),
            "{args:?}: {}",
            text(&output)
        );
    }
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "nothing created"
    );
}

#[test]
fn stat_names_the_trees() {
    let dir = tempdir();
    let db = dir.path().join("db");
    let db = db.to_str().unwrap();
    let file = dir.path().join("ops.txt");
    std::fs::write(&file, ops(3000).0).unwrap();
    ok(&[
        "load",
        db,
        "--ops",
        file.to_str().unwrap(),
        "--batch",
        "300",
    ]);
    let out = ok(&["stat", db]);
    assert!(out.contains("tree a") && out.contains("tree b"), "{out}");
    assert!(out.contains("compression ratio"), "{out}");
    let json: serde_json::Value = serde_json::from_str(&ok(&["stat", db, "--json"])).unwrap();
    let trees = json["trees"].as_array().unwrap();
    assert_eq!(trees[0]["name"], "a");
    assert_eq!(trees[0]["stats"]["record_count"], 2000);
    assert_eq!(trees[1]["stats"]["record_count"], 1000);
    assert_eq!(trees[0]["len"], 2000);
    assert_eq!(trees[1]["len"], 1000);
    let ratio = trees[0]["compression_ratio"].as_f64().unwrap();
    assert!(ratio > 1.0, "repetitive values compress: {ratio}");
}

/// Flips bytes in the middle of block `page` of the tree file.
fn damage(file: &Path, block_bytes: u64, page: u64) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(file)
        .unwrap();
    let offset = page * block_bytes + block_bytes / 2;
    let mut bytes = [0u8; 16];
    f.read_exact_at(&mut bytes, offset).unwrap();
    for b in &mut bytes {
        *b ^= 0x5a;
    }
    f.write_all_at(&bytes, offset).unwrap();
    f.sync_all().unwrap();
}

#[test]
fn check_passes_a_healthy_database_and_names_a_damaged_page() {
    let dir = tempdir();
    let db = dir.path().join("db");
    let file = dir.path().join("ops.txt");
    std::fs::write(&file, ops(2000).0).unwrap();
    let db_str = db.to_str().unwrap();
    ok(&[
        "load",
        db_str,
        "--ops",
        file.to_str().unwrap(),
        "--batch",
        "200",
    ]);
    let out = ok(&["check", db_str]);
    assert!(out.contains("OK"), "{out}");
    // Tree "a" is the first created (id 1); default blocks are 8 KiB. Page
    // 0 is the store's meta page, 1 the root: damage a leaf.
    let json: serde_json::Value = serde_json::from_str(&ok(&["stat", db_str, "--json"])).unwrap();
    let a = &json["trees"][0];
    assert_eq!(a["name"], "a");
    assert!(a["stats"]["height"].as_u64().unwrap() >= 2, "{a}");
    let tree_file = db.join("tree-00001.bdb");
    let block_bytes = 8192;
    let page_count = std::fs::metadata(&tree_file).unwrap().len() / block_bytes;
    assert!(page_count > 3, "{page_count} blocks");
    damage(&tree_file, block_bytes, 2);
    let output = barracuda(&["check", db_str]);
    assert_eq!(output.status.code(), Some(1), "{}", text(&output));
    let message = text(&output);
    assert!(message.contains("DAMAGED"), "{message}");
    assert!(message.contains("page 2"), "{message}");
    assert!(message.contains("tree b: OK"), "{message}");
}

/// Each file the check must not do without: deleted, `check` fails (exit
/// 1) naming it, and deletes nothing.
#[test]
fn check_refuses_a_database_missing_a_file_and_deletes_nothing() {
    for (missing, named) in [
        ("CATALOG", "CATALOG is missing"),
        ("wal.log", "wal.log"),
        ("tree-00001.bdb", "tree-00001.bdb"),
        ("tree-00002.bdb", "tree-00002.bdb"),
    ] {
        let dir = tempdir();
        let db = dir.path().join("db");
        let file = dir.path().join("ops.txt");
        std::fs::write(&file, ops(300).0).unwrap();
        let db_str = db.to_str().unwrap();
        ok(&["load", db_str, "--ops", file.to_str().unwrap()]);
        std::fs::remove_file(db.join(missing)).unwrap();
        let listing = |dir: &Path| {
            let mut names: Vec<String> = std::fs::read_dir(dir)
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .filter(|name| name != "LOCK")
                .collect();
            names.sort();
            names
        };
        let before = listing(&db);
        let output = barracuda(&["check", db_str]);
        assert_eq!(
            output.status.code(),
            Some(1),
            "{missing}: {}",
            text(&output)
        );
        assert!(
            text(&output).contains(named),
            "{missing}: {}",
            text(&output)
        );
        assert!(
            !text(&output).contains("OK: "),
            "{missing}: {}",
            text(&output)
        );
        assert_eq!(
            listing(&db),
            before,
            "{missing}: the check changed the files"
        );
    }
}
