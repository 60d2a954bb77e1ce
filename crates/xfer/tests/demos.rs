//! The three demos through the real `xfer` binary, with small parameters: each starts its
//! own server, runs its scenario and must exit 0 with a clean audit; the bank also on
//! MongoDB and MySQL (the servers `scripts/services` starts), whose databases it drops.

use std::process::Command;

fn demo(args: &[&str]) {
    let out = Command::new(env!("CARGO_BIN_EXE_xfer"))
        .arg("demo")
        .args(args)
        .env_remove("XFER_URL")
        .env_remove("XFER_TOKEN")
        .output()
        .expect("xfer demo runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains("audit: clean"),
        "xfer demo {}: {}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        args.join(" "),
        out.status
    );
}

#[test]
fn bank() {
    demo(&["bank", "--transfers", "300"]);
}

#[test]
fn bank_on_mongodb() {
    demo(&["bank", "--transfers", "300", "--store", "mongodb"]);
}

#[test]
fn bank_on_mysql() {
    demo(&["bank", "--transfers", "300", "--store", "mysql"]);
}

#[test]
fn flash_sale() {
    demo(&[
        "flash-sale",
        "--users",
        "40",
        "--stock",
        "20",
        "--arrive-ms",
        "1000",
    ]);
}

#[test]
fn points_and_cash() {
    demo(&["points-and-cash"]);
}
