//! The `xfer` command: see `xfer --help`.

use xfer::cli::{self, Cli, Command};
use xfer_server::config::ServeConfig;
use xfer_server::server::{init_logging, Server};

/// mimalloc, not the system allocator: records, ids and batches are many small, short-lived
/// allocations across threads, which mimalloc serves far more cheaply than glibc's
/// `malloc`/`free` (`docs/benchmarks.md#mimalloc`).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's `purge_delay` option: its place in `mi_option_e` in the mimalloc 3 header that
/// libmimalloc-sys 0.1.49 builds (Cargo.lock pins it; a test checks the place still holds
/// the option's default, from that version's `options.c`).
const MI_OPTION_PURGE_DELAY: std::ffi::c_int = 15;

/// How long freed memory stays mapped before mimalloc gives it back to the OS. Its default
/// is 1 s; every checkpoint frees the records it evicted while as many are being made, so
/// 10 s keeps that memory for reuse, at the cost of a higher peak, and memory freed for good
/// still goes back, 10 s later (`docs/benchmarks.md#mimalloc-purge`).
const PURGE_DELAY_MS: std::ffi::c_long = 10_000;

/// mimalloc's `arena_purge_mult` option (as [`MI_OPTION_PURGE_DELAY`]): memory in its arenas
/// (nearly all of ours) is purged `purge_delay` times this after the first free since the
/// last purge, and then everything free at that moment goes, including what was freed a
/// millisecond before and is about to be used again.
const MI_OPTION_ARENA_PURGE_MULT: std::ffi::c_int = 24;

/// Arena memory goes back to the OS a minute (10 s × 6), not 10 s, after it is first freed.
/// Under steady load each purge decommits the pages the checkpoint has just freed, and the
/// allocator faults them in again, zeroed by the kernel; a purge's cost is about the same
/// however rarely it comes, so purging six times more rarely saves most of it
/// (`docs/benchmarks.md#mimalloc-purge`).
const ARENA_PURGE_MULT: std::ffi::c_long = 6;

#[allow(unsafe_code)]
mod mimalloc_options {
    extern "C" {
        // From mimalloc.h: `long mi_option_get(mi_option_t)`, `void mi_option_set(mi_option_t,
        // long)`; `mi_option_t` is a C enum (an int).
        #[cfg(test)]
        pub fn mi_option_get(option: std::ffi::c_int) -> std::ffi::c_long;
        pub fn mi_option_set(option: std::ffi::c_int, value: std::ffi::c_long);
    }

    /// Option `option`'s value.
    #[cfg(test)]
    pub fn get(option: std::ffi::c_int) -> std::ffi::c_long {
        // SAFETY: mimalloc (the global allocator, so linked into this binary) defines the
        // function with this signature; it reads one entry of its option table, and any
        // option below `_mi_option_last` (47) is a valid index.
        unsafe { mi_option_get(option) }
    }

    /// Sets option `option` to `value`.
    pub fn set(option: std::ffi::c_int, value: std::ffi::c_long) {
        // SAFETY: as in `get`; it stores one entry of the option table, which mimalloc
        // reads with relaxed atomics from any thread, so setting it at any time is sound.
        unsafe { mi_option_set(option, value) }
    }
}

/// Sets the allocator's options (`MIMALLOC_PURGE_DELAY` and `MIMALLOC_ARENA_PURGE_MULT` in
/// the environment win).
fn tune_allocator() {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
        mimalloc_options::set(MI_OPTION_PURGE_DELAY, PURGE_DELAY_MS);
    }
    if std::env::var_os("MIMALLOC_ARENA_PURGE_MULT").is_none() {
        mimalloc_options::set(MI_OPTION_ARENA_PURGE_MULT, ARENA_PURGE_MULT);
    }
}

fn main() {
    tune_allocator();
    let cli = Cli::parse_checked();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => fail(&format!("starting the runtime: {e}")),
    };
    let code = runtime.block_on(async move {
        match cli.command {
            Command::Serve(args) => serve(args).await,
            Command::Worker(args) => worker(args).await,
            Command::Demo(demo) => xfer::demo::run(demo, &cli.remote).await,
            Command::Consume(args) => consume(args, &cli.remote).await,
            other => cli::run(other, &cli.remote).await,
        }
    });
    match code {
        Ok(code) => std::process::exit(code),
        Err(e) => fail(&e),
    }
}

fn fail(message: &str) -> ! {
    eprintln!("error: {message}");
    std::process::exit(1)
}

async fn serve(args: xfer_server::config::ServeArgs) -> Result<i32, String> {
    let cfg = ServeConfig::resolve(&args).map_err(|e| e.to_string())?;
    init_logging(cfg.log_format, &cfg.log)?;
    let stop = shutdown_signal();
    let server = Server::start(cfg).await?;
    // One line on stdout that scripts and tests wait for.
    println!("xfer serve: listening on http://{}", server.addr());
    stop.await;
    tracing::info!("shutting down: no new connections; finishing requests under way");
    server.shutdown().await?;
    Ok(0)
}

async fn worker(args: xfer_server::config::ServeArgs) -> Result<i32, String> {
    let cfg = ServeConfig::resolve(&args).map_err(|e| e.to_string())?;
    init_logging(cfg.log_format, &cfg.log)?;
    let stop = shutdown_signal();
    xfer_server::worker::run(cfg, async {
        stop.await;
        tracing::info!("shutting down after the pass under way");
    })
    .await?;
    Ok(0)
}

async fn consume(args: xfer::consume::ConsumeArgs, remote: &cli::Remote) -> Result<i32, String> {
    let stop = shutdown_signal();
    init_logging(xfer_server::config::LogFormat::Text, "info")?;
    let client = xfer_client::Client::new(&remote.url, remote.token.clone())?;
    xfer::consume::run(args, client, stop).await
}

/// Completes on SIGTERM or SIGINT. The handlers are installed when this is called, not when
/// the future is first polled, so a signal that arrives while the command is still starting
/// stops it gracefully instead of killing it.
fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    use tokio::signal::unix::{signal, SignalKind};
    let install = |kind: SignalKind, name: &str| match signal(kind) {
        Ok(s) => s,
        Err(e) => fail(&format!("installing the {name} handler: {e}")),
    };
    let mut term = install(SignalKind::terminate(), "SIGTERM");
    let mut int = install(SignalKind::interrupt(), "SIGINT");
    async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_purge_options_are_where_we_set_them() {
        // mimalloc's defaults around them (its `options.c`): eager_commit_delay (14) = 1,
        // purge_delay (15) = 1,000 ms, use_numa_nodes (16) = 0; arena_reserve (23) = 1 GiB
        // in KiB, arena_purge_mult (24) = 1, purge_extend_delay (25) = 1. A mimalloc whose
        // options moved fails here instead of changing some other option.
        if std::env::var_os("MIMALLOC_PURGE_DELAY").is_some()
            || std::env::var_os("MIMALLOC_ARENA_PURGE_MULT").is_some()
        {
            return;
        }
        assert_eq!(mimalloc_options::get(MI_OPTION_PURGE_DELAY - 1), 1);
        assert_eq!(mimalloc_options::get(MI_OPTION_PURGE_DELAY), 1_000);
        assert_eq!(mimalloc_options::get(MI_OPTION_PURGE_DELAY + 1), 0);
        assert_eq!(
            mimalloc_options::get(MI_OPTION_ARENA_PURGE_MULT - 1),
            1024 * 1024
        );
        assert_eq!(mimalloc_options::get(MI_OPTION_ARENA_PURGE_MULT), 1);
        assert_eq!(mimalloc_options::get(MI_OPTION_ARENA_PURGE_MULT + 1), 1);
        tune_allocator();
        assert_eq!(mimalloc_options::get(MI_OPTION_PURGE_DELAY), PURGE_DELAY_MS);
        assert_eq!(
            mimalloc_options::get(MI_OPTION_ARENA_PURGE_MULT),
            ARENA_PURGE_MULT
        );
    }
}
