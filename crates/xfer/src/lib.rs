//! The `xfer` command as a library, so that its parsing and printing are tested: the
//! command line, the client's flags, the tables it prints and the demos. The server it runs
//! is `xfer_server`, the bench `xfer_bench`, the HTTP client `xfer_client`.
//!
//! | module | what |
//! |---|---|
//! | `cli` | the subcommands and what each does as a client of the API |
//! | `webhook` | `xfer webhook`: webhook endpoints and their dead letters |
//! | `consume` | `xfer consume`: transfer requests from NATS JetStream or RabbitMQ |
//! | `demo` | `xfer demo bank / flash-sale / points-and-cash` |
//! | `table` | readable tables of the API's JSON |
//! | `remote` | where the server is and how to print: the client's global flags |

pub mod cli;
pub mod consume;
pub mod demo;
pub mod remote;
pub mod table;
pub mod webhook;
