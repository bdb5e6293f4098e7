//! The protocol layer on arbitrary input: any action (first byte), in JSON
//! 1.0 or the query protocol, any headers of a signed request (optional),
//! any body; the broker answers every request with success or a 4xx and
//! never panics or fails (5xx).
//! One broker serves every input, so state builds up as in production.

#![no_main]

use std::sync::{Arc, LazyLock};

use ackbox_core::clock::SystemClock;
use ackbox_core::receipt::ReceiptKey;
use ackbox_engine::store::sqlite::{Durability, SqliteStore};
use ackbox_engine::{Engine, EngineConfig};
use ackbox_server::action::Action;
use ackbox_server::app::{AppState, app};
use ackbox_server::auth::Authenticator;
use axum::Router;
use axum::body::Body;
use axum::http::Request;
use libfuzzer_sys::fuzz_target;
use tower::ServiceExt;

struct Broker {
    runtime: tokio::runtime::Runtime,
    open: Router,
    secured: Router,
    _dir: tempfile::TempDir,
}

static BROKER: LazyLock<Broker> = LazyLock::new(|| {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("a runtime");
    let dir = tempfile::tempdir().expect("a temporary directory");
    let credentials = dir.path().join("credentials.toml");
    std::fs::write(
        &credentials,
        "[[keys]]\naccess_key_id = \"FUZZ\"\nsecret_access_key = \"fuzz-secret-0123456789\"\n\
         allow_queues = [\"q*\"]\nallow_actions = [\"*\"]\n",
    )
    .expect("the credentials are written");
    let (open, secured) = runtime.block_on(async {
        let store = SqliteStore::open(
            dir.path(),
            Durability::Relaxed {
                sync_interval: std::time::Duration::from_secs(5),
            },
        )
        .expect("a store");
        let engine = Engine::start(
            EngineConfig::new(ReceiptKey::new([7; 32])),
            Arc::new(store),
            Arc::new(SystemClock),
        )
        .await
        .expect("an engine");
        for name in ["q", "q-dlq"] {
            let _ = engine
                .create_queue(name, &Default::default(), &Default::default())
                .await;
        }
        let open = app(AppState::new(engine.clone(), "http://localhost"));
        let mut secured = AppState::new(engine, "http://localhost");
        secured.auth = Arc::new(Authenticator::sigv4(&credentials).expect("valid credentials"));
        (open, app(secured))
    });
    Broker {
        runtime,
        open,
        secured,
        _dir: dir,
    }
});

fuzz_target!(|data: &[u8]| {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    let broker = &*BROKER;
    let action = Action::ALL[usize::from(selector & 0x3f) % Action::ALL.len()];
    // Bit 0x40: the query protocol, the body a form after `Action=<name>&`.
    let query = selector & 0x40 != 0;
    let mut request = if query {
        Request::post("/").header("content-type", "application/x-www-form-urlencoded")
    } else {
        Request::post("/")
            .header("content-type", "application/x-amz-json-1.0")
            .header("x-amz-target", action.target())
    };
    // The high bit: a signed request, its headers before the first newline.
    let (router, body) = if selector & 0x80 == 0 {
        (&broker.open, rest)
    } else {
        let split = rest
            .iter()
            .position(|&byte| byte == b'\n')
            .unwrap_or(rest.len());
        let (head, body) = rest.split_at(split);
        for line in String::from_utf8_lossy(head).split('\r') {
            if let Some((name, value)) = line.split_once(':') {
                request = request.header(name.trim(), value.trim());
            }
        }
        (&broker.secured, body.get(1..).unwrap_or_default())
    };
    let body = if query {
        [format!("Action={}&", action.name()).as_bytes(), body].concat()
    } else {
        body.to_vec()
    };
    let Ok(request) = request.body(Body::from(body)) else {
        return;
    };
    let status = broker.runtime.block_on(async {
        match tokio::time::timeout(
            std::time::Duration::from_secs(25),
            router.clone().oneshot(request),
        )
        .await
        {
            Ok(Ok(response)) => response.status(),
            Ok(Err(never)) => match never {},
            Err(_) => panic!("a request hung for 25 s"),
        }
    });
    assert!(
        !status.is_server_error(),
        "{} answered {status}",
        action.target()
    );
});
