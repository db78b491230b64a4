//! The `rk-pattern` command line: output bytes, compare mode, exit codes, number syntax,
//! and equality with `mdref-run --pattern` when mdref is present (host side, no VM).

use raidkit_testkit::pattern::{fill_mdref, fill_tagged, pattern_word};
use std::io::Write;
use std::process::{Command, Output, Stdio};

fn rk(args: &[&str], stdin: Option<&[u8]>) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_rk-pattern"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    if let Some(data) = stdin {
        // The child may exit early (mismatch); a broken pipe is fine.
        let _ = input.write_all(data);
    }
    drop(input);
    child.wait_with_output().unwrap()
}

fn text(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn writes_the_splitmix_test_vector() {
    let o = rk(&["1234567", "24"], None);
    assert!(o.status.success());
    let words: Vec<u64> = o
        .stdout
        .chunks(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(
        words,
        [
            6457827717110365317,
            3203168211198807973,
            9817491932198370423
        ]
    );
}

#[test]
fn windows_and_suffixes() {
    let o = rk(&["7", "3K", "0x1001"], None);
    let mut want = vec![0; 3072];
    fill_mdref(7, 0x1001, &mut want);
    assert_eq!(o.stdout, want);
    let o = rk(&["--tagged", "9", "2s", "1s"], None);
    let mut want = vec![0; 1024];
    fill_tagged(9, 512, &mut want);
    assert_eq!(o.stdout, want);
    assert_eq!(&o.stdout[..8], &1u64.to_le_bytes());
    assert_eq!(&o.stdout[8..16], &pattern_word(9, 1).to_le_bytes());
    assert_eq!(rk(&["1", "1M"], None).stdout.len(), 1 << 20);
}

#[test]
fn compare_mode() {
    let mut data = vec![0; 4096];
    fill_tagged(5, 0, &mut data);
    let ok = rk(&["-c", "--tagged", "5", "4K"], Some(&data));
    assert_eq!(ok.status.code(), Some(0));
    assert_eq!(text(&ok), "");

    data[700] ^= 1;
    data[3000] ^= 1;
    let bad = rk(&["--tagged", "-c", "5", "4K"], Some(&data));
    assert_eq!(bad.status.code(), Some(1));
    assert_eq!(
        text(&bad),
        "rk-pattern: MISMATCH: first differing byte at offset 700, 2 differing 512-byte sectors\n"
    );

    let short = rk(&["-c", "--tagged", "5", "4K"], Some(&data[..100]));
    assert_eq!(short.status.code(), Some(1));
    assert_eq!(
        text(&short),
        "rk-pattern: short input: got 100 of 4096 bytes\n"
    );

    // Window compare with an offset.
    let mut win = vec![0; 1000];
    fill_mdref(3, 12345, &mut win);
    assert_eq!(
        rk(&["-c", "3", "1000", "12345"], Some(&win)).status.code(),
        Some(0)
    );
    assert_eq!(
        rk(&["-c", "3", "1000", "12346"], Some(&win)).status.code(),
        Some(1)
    );
}

#[test]
fn usage_errors_exit_2() {
    for args in [
        &[][..],
        &["1"][..],
        &["x", "1"][..],
        &["1", "2", "3", "4"][..],
        &["1", "5Q"][..],
    ] {
        let o = rk(args, None);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        assert!(String::from_utf8_lossy(&o.stderr).starts_with("rk-pattern: "));
    }
}

#[test]
fn equals_mdref_pattern_when_available() {
    let Ok(md) = raidkit_testkit::mdref::locate() else {
        println!("skip: mdref not available");
        return;
    };
    let theirs = Command::new(md.path())
        .args(["--pattern", "77", "100K", "0x1003"])
        .output()
        .unwrap();
    assert!(theirs.status.success());
    assert_eq!(rk(&["77", "100K", "0x1003"], None).stdout, theirs.stdout);
}
