//! One module per subcommand.

pub(crate) mod bench;
pub(crate) mod dlq;
pub(crate) mod queue;
pub(crate) mod receive;
pub(crate) mod redrive;
pub(crate) mod replay;
pub(crate) mod send;
pub(crate) mod serve;
pub(crate) mod store;
