//! The benchmark command line as a newcomer meets it: numbers out of
//! range refused with their range (exit status 2), each workload's legend
//! and verdict, and benchmark data removed when a signal stops the run or
//! never written when the disk is too small.

#![allow(clippy::unwrap_used, reason = "tests may unwrap")]
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn tempdir() -> tempfile::TempDir {
    // Under target/: an ext4 filesystem where O_DIRECT works (not tmpfs).
    tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap()
}

fn command(args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_barracuda-bench"));
    command
        .args(args)
        .env_remove("BARRACUDA_BACKTRACE")
        .env_remove("RUST_LIB_BACKTRACE");
    command
}

fn barracuda_bench(args: &[&str]) -> Output {
    command(args).output().unwrap()
}

fn stdout(output: &Output) -> String {
    String::from_utf8(output.stdout.clone()).unwrap()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn numbers_out_of_range_exit_2_naming_the_range() {
    // (arguments, the range the message must name)
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["sweep", "--rows", "18446744073709551615"],
            "100..=1000000000",
        ),
        (
            vec!["sweep", "--rows", "99999999999999999999999"],
            "100..=1000000000",
        ),
        (vec!["sweep", "--scale", "1000000"], "0.01..=100"),
        (vec!["sweep", "--scale", "0"], "0.01..=100"),
        (vec!["sweep", "--threads", "0"], "1..=1024"),
        (vec!["sweep", "--ratio", "5"], "0.05..=1"),
        (vec!["sweep", "--ratio", "-0.5"], "0.05..=1"),
        (vec!["sweep", "--measure-ms", "0"], "100..=3600000"),
        (
            vec!["sweep", "--device-latency-us", "18446744073709551615"],
            "0..=1000000",
        ),
        (vec!["sweep", "--repeat", "0"], "1..=100"),
        (vec!["sweep", "--pool-mib", "0"], "1..=65536"),
        (vec!["hotset", "--threads", "-3"], "1..=1024"),
        (vec!["flush", "--pools-mib", "8,0"], "1..=65536"),
        (vec!["iothreads", "--read-threads", "1,200"], "1..=64"),
        (vec!["io", "--seconds", "0"], "0.1..=3600"),
        (vec!["io", "--depth", "0"], "1..=4096"),
        (vec!["codec", "--pages", "0"], "1..=1000000"),
        (vec!["fill", "--rows", "0"], "1..=100000000"),
    ];
    for (args, range) in cases {
        let output = barracuda_bench(&args);
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
}

/// The `barracuda-bench-*` directories in `dir`.
fn bench_dirs(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("barracuda-bench-"))
        })
        .collect()
}

#[test]
fn a_signal_during_bench_sweep_leaves_no_data_behind() {
    for signal in [libc::SIGINT, libc::SIGTERM] {
        let temp = tempdir();
        let mut child = command(&["sweep"])
            .env("TMPDIR", temp.path())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Wait until the run has created its directory and started writing
        // into it (the default run loads for many seconds after that).
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let dirs = bench_dirs(temp.path());
            if dirs
                .iter()
                .any(|d| std::fs::read_dir(d).is_ok_and(|mut e| e.next().is_some()))
            {
                break;
            }
            assert!(child.try_wait().unwrap().is_none(), "the bench ended early");
            assert!(Instant::now() < deadline, "no benchmark directory appeared");
            std::thread::sleep(Duration::from_millis(10));
        }
        let pid = libc::pid_t::try_from(child.id()).unwrap();
        // SAFETY: kill with a live child's pid and a valid signal number.
        assert_eq!(unsafe { libc::kill(pid, signal) }, 0);
        let output = child.wait_with_output().unwrap();
        assert_eq!(
            output.status.code(),
            Some(128 + signal),
            "{}",
            stderr(&output)
        );
        assert_eq!(
            bench_dirs(temp.path()),
            Vec::<PathBuf>::new(),
            "signal {signal}"
        );
    }
}

#[test]
fn a_run_larger_than_the_free_disk_is_refused_before_writing() {
    let temp = tempdir();
    let output = command(&["sweep", "--pool-mib", "65536", "--scale", "100"])
        .env("TMPDIR", temp.path())
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    assert!(stderr(&output).contains("MiB free"), "{}", stderr(&output));
    assert_eq!(bench_dirs(temp.path()), Vec::<PathBuf>::new());
}

/// Each workload, run small, ends with its legend and a verdict line, and
/// leaves no data in the temporary directory.
#[test]
fn bench_workloads_print_a_legend_and_a_verdict() {
    let quick = [
        "--measure-ms",
        "100",
        "--warmup-ms",
        "0",
        "--warmup-max-ms",
        "0",
        "--threads",
        "2",
    ];
    let runs: Vec<Vec<&str>> = vec![
        [
            &["sweep", "--pool-mib", "1", "--rows", "3000"][..],
            &["--configs", "plain,zlib-cost"],
            &quick,
        ]
        .concat(),
        [
            &["flush", "--pools-mib", "1", "--data-mib", "4"][..],
            &quick,
        ]
        .concat(),
        vec![
            "codec",
            "--pages",
            "8",
            "--rounds",
            "1",
            "--codecs",
            "none,zlib-6",
        ],
        vec!["fill", "--rows", "5000"],
        vec![
            "fill",
            "--pattern",
            "family",
            "--rows",
            "3000",
            "--page-kib",
            "4",
        ],
        [
            &["iothreads", "--pool-mib", "1", "--read-threads", "1,2"][..],
            &quick,
        ]
        .concat(),
        vec![
            "io",
            "--size-mib",
            "8",
            "--seconds",
            "0.1",
            "--threads",
            "1",
            "--depth",
            "1",
        ],
    ];
    for args in runs {
        let temp = tempdir();
        let output = command(&args).env("TMPDIR", temp.path()).output().unwrap();
        assert!(output.status.success(), "{args:?}: {}", stderr(&output));
        let out = stdout(&output);
        let legend = out
            .find("\nlegend:\n")
            .unwrap_or_else(|| panic!("{args:?}: {out}"));
        let verdict = out
            .find("\nverdict")
            .unwrap_or_else(|| panic!("{args:?}: {out}"));
        assert!(legend < verdict, "{args:?}: {out}");
        assert!(out[verdict + 1..].lines().count() <= 2, "{args:?}: {out}");
        assert_eq!(bench_dirs(temp.path()), Vec::<PathBuf>::new(), "{args:?}");
    }
}
