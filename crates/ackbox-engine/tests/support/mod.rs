//! What the engine's model tests share: an engine on a fresh store (SQLite,
//! or the log store) under a manual clock, and the receive request they
//! compare.

#![allow(dead_code, unreachable_pub)]

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use ackbox_core::clock::ManualClock;
use ackbox_core::receipt::ReceiptKey;
use ackbox_engine::receive::ReceiveRequest;
use ackbox_engine::store::Store;
use ackbox_engine::store::log::LogStore;
use ackbox_engine::store::sqlite::{Durability, SqliteStore};
use ackbox_engine::{Engine, EngineConfig};

/// Starts (or restarts) an engine on the store in `dir`. The receipt key is
/// fixed, so handles issued before a restart stay valid after it; the
/// retention sweeper is kept out of the way of the model.
pub async fn start_engine(dir: &Path, clock: &ManualClock) -> Engine {
    let store = SqliteStore::open(dir, RELAXED).unwrap();
    start_engine_on(Arc::new(store), clock).await
}

/// [`start_engine`] on the log store.
pub async fn start_engine_on_the_log(dir: &Path, clock: &ManualClock) -> Engine {
    let store = LogStore::open(dir, RELAXED).await.unwrap();
    start_engine_on(Arc::new(store), clock).await
}

const RELAXED: Durability = Durability::Relaxed {
    sync_interval: Duration::from_secs(60),
};

async fn start_engine_on(store: Arc<dyn Store>, clock: &ManualClock) -> Engine {
    let mut config = EngineConfig::new(ReceiptKey::new([7; 32]));
    config.retention_sweep_interval = Duration::from_secs(3_600);
    Engine::start(config, store, Arc::new(clock.clone()))
        .await
        .unwrap()
}

/// A receive that does not wait and reports each message's receive count.
pub fn receive_request(max: i32, visibility_seconds: i32) -> ReceiveRequest {
    ReceiveRequest {
        max_number_of_messages: Some(max),
        visibility_timeout: Some(visibility_seconds),
        wait_time_seconds: Some(0),
        system_attribute_names: vec!["ApproximateReceiveCount".into()],
        ..ReceiveRequest::default()
    }
}
