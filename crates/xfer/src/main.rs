//! The `xfer` command: see `xfer --help`.

use clap::Parser;
use xfer::cli::{self, Cli, Command};
use xfer::config::ServeConfig;
use xfer::server::{init_logging, Server};

/// mimalloc, not the system allocator: `malloc`/`free` were 16 % of `xfer bench`'s CPU with
/// glibc's (records, ids and batches are many small, short-lived allocations across
/// threads). Measured in docs/benchmarks.md.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    let cli = Cli::parse();
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

async fn serve(args: xfer::config::ServeArgs) -> Result<i32, String> {
    let cfg = ServeConfig::resolve(&args).map_err(|e| e.to_string())?;
    init_logging(cfg.log_format, &cfg.log)?;
    let server = Server::start(cfg).await?;
    // One line on stdout that scripts and tests wait for.
    println!("xfer serve: listening on http://{}", server.addr());
    shutdown_signal().await;
    tracing::info!("shutting down: no new connections; finishing requests under way");
    server.shutdown().await?;
    Ok(0)
}

async fn worker(args: xfer::config::ServeArgs) -> Result<i32, String> {
    let cfg = ServeConfig::resolve(&args).map_err(|e| e.to_string())?;
    init_logging(cfg.log_format, &cfg.log)?;
    xfer::worker::run(cfg, async {
        shutdown_signal().await;
        tracing::info!("shutting down after the pass under way");
    })
    .await?;
    Ok(0)
}

async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => fail(&format!("installing the SIGTERM handler: {e}")),
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}
