//! [`Remote`]: where the server is and how to print its answers: the client's flags, global
//! so that they may stand anywhere on a client command's line.

use clap::Args;

/// Where the server is and how to print.
#[derive(Clone, Debug, Args)]
pub struct Remote {
    /// The server's URL.
    #[arg(
        long,
        env = "XFER_URL",
        global = true,
        default_value = "http://127.0.0.1:7700"
    )]
    pub url: String,
    /// A bearer token (when the server has auth on).
    #[arg(long, env = "XFER_TOKEN", global = true, hide_env_values = true)]
    pub token: Option<String>,
    /// Print the API's JSON instead of tables.
    #[arg(long, global = true)]
    pub json: bool,
}
