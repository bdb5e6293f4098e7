//! Hostile clients stay cheap (invariant 6 at the transport): an oversized
//! body is refused from its `Content-Length` without being read, slow heads
//! and slow bodies are cut off, oversized heads get 431, and connections
//! beyond the cap wait instead of being served; and HTTPS works with the
//! official AWS SDK.

use std::time::Duration;

use ackbox_server::limits::HttpLimits;
use ackbox_testkit::server::TestServer;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Bounds every wait of these tests, so a broken limit fails instead of hanging.
const PATIENCE: Duration = Duration::from_secs(10);

async fn server(limits: HttpLimits) -> TestServer {
    TestServer::builder().limits(limits).start().await
}

async fn connect(server: &TestServer) -> TcpStream {
    TcpStream::connect(server.url().trim_start_matches("http://"))
        .await
        .unwrap()
}

/// Reads until the peer closes or `PATIENCE` runs out; what arrived.
async fn read_until_closed(stream: &mut TcpStream) -> String {
    let mut received = Vec::new();
    let mut chunk = [0u8; 4_096];
    loop {
        match tokio::time::timeout(PATIENCE, stream.read(&mut chunk)).await {
            Ok(Ok(0) | Err(_)) => break,
            Ok(Ok(read)) => received.extend_from_slice(&chunk[..read]),
            Err(_) => panic!(
                "the server kept the connection open past {PATIENCE:?}; got {:?}",
                String::from_utf8_lossy(&received)
            ),
        }
    }
    String::from_utf8_lossy(&received).into_owned()
}

fn head(target: &str, content_length: usize) -> String {
    format!(
        "POST / HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/x-amz-json-1.0\r\n\
         X-Amz-Target: AmazonSQS.{target}\r\nContent-Length: {content_length}\r\n\r\n"
    )
}

#[tokio::test]
async fn an_oversized_body_is_refused_from_its_length_without_being_read() {
    let server = server(HttpLimits::default()).await;
    let mut stream = connect(&server).await;
    // 100 MiB announced, only the head sent: the answer cannot wait for the body.
    stream
        .write_all(head("SendMessage", 100 * 1_048_576).as_bytes())
        .await
        .unwrap();
    let reply = read_until_closed(&mut stream).await;
    assert!(reply.starts_with("HTTP/1.1 413"), "{reply}");
    assert!(reply.contains("RequestEntityTooLarge;Sender"), "{reply}");
    assert!(
        reply.contains("104857600 bytes; this server accepts at most 8388608"),
        "{reply}"
    );
}

#[tokio::test]
async fn a_chunked_body_over_the_cap_is_refused_too() {
    let limits = HttpLimits {
        max_body_bytes: ackbox_server::limits::MIN_BODY_BYTES,
        ..HttpLimits::default()
    };
    let server = server(limits).await;
    let mut stream = connect(&server).await;
    let request = "POST / HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/x-amz-json-1.0\r\n\
                   X-Amz-Target: AmazonSQS.SendMessage\r\nTransfer-Encoding: chunked\r\n\r\n";
    stream.write_all(request.as_bytes()).await.unwrap();
    let chunk = vec![b'x'; 64 * 1_024];
    let mut sent = 0;
    // Keep sending until the server answers; it must before the body ends.
    while sent <= limits.max_body_bytes + chunk.len() {
        let frame = format!("{:x}\r\n", chunk.len());
        if stream.write_all(frame.as_bytes()).await.is_err()
            || stream.write_all(&chunk).await.is_err()
            || stream.write_all(b"\r\n").await.is_err()
        {
            break;
        }
        sent += chunk.len();
    }
    let reply = read_until_closed(&mut stream).await;
    assert!(reply.starts_with("HTTP/1.1 413"), "{reply}");
}

#[tokio::test]
async fn a_body_that_trickles_in_is_cut_off() {
    let limits = HttpLimits {
        body_timeout: Duration::from_millis(300),
        ..HttpLimits::default()
    };
    let server = server(limits).await;
    let mut stream = connect(&server).await;
    stream
        .write_all(head("ListQueues", 100).as_bytes())
        .await
        .unwrap();
    stream.write_all(b"{").await.unwrap();
    let reply = read_until_closed(&mut stream).await;
    assert!(reply.starts_with("HTTP/1.1 408"), "{reply}");
    assert!(reply.contains("RequestTimeout;Sender"), "{reply}");
}

#[tokio::test]
async fn headers_that_trickle_in_or_never_come_end_the_connection() {
    let limits = HttpLimits {
        header_timeout: Duration::from_millis(300),
        ..HttpLimits::default()
    };
    let server = server(limits).await;
    let mut slow = connect(&server).await;
    slow.write_all(b"POST / HTTP/1.1\r\nHost: local")
        .await
        .unwrap();
    let mut idle = connect(&server).await;
    assert_eq!(
        read_until_closed(&mut slow).await,
        "",
        "closed without an answer"
    );
    assert_eq!(read_until_closed(&mut idle).await, "");
    // A well-behaved client is still served.
    let reply = ackbox_testkit::client::call_raw(&server.url(), "GET", "/healthz", &[], b"").await;
    assert_eq!(reply.status, 200);
}

#[tokio::test]
async fn an_oversized_head_is_431() {
    let server = server(HttpLimits::default()).await;
    let mut stream = connect(&server).await;
    let request = format!(
        "GET /healthz HTTP/1.1\r\nHost: localhost\r\nX-Padding: {}\r\n\r\n",
        "a".repeat(20 * 1_024)
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let reply = read_until_closed(&mut stream).await;
    assert!(reply.starts_with("HTTP/1.1 431"), "{reply}");
}

#[tokio::test]
async fn connections_beyond_the_cap_wait_until_one_closes() {
    let limits = HttpLimits {
        max_connections: 2,
        ..HttpLimits::default()
    };
    let server = server(limits).await;
    let request = b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n";
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut stream = connect(&server).await;
        stream.write_all(request).await.unwrap();
        let mut buffer = [0u8; 512];
        let read = tokio::time::timeout(PATIENCE, stream.read(&mut buffer))
            .await
            .unwrap()
            .unwrap();
        assert!(buffer[..read].starts_with(b"HTTP/1.1 200"));
        held.push(stream);
    }
    let mut third = connect(&server).await;
    third.write_all(request).await.unwrap();
    let mut buffer = [0u8; 512];
    assert!(
        tokio::time::timeout(Duration::from_millis(500), third.read(&mut buffer))
            .await
            .is_err(),
        "a third connection is not served while two are open"
    );
    drop(held.pop());
    let read = tokio::time::timeout(PATIENCE, third.read(&mut buffer))
        .await
        .expect("served once a slot is free")
        .unwrap();
    assert!(buffer[..read].starts_with(b"HTTP/1.1 200"));
}

#[tokio::test]
async fn the_aws_sdk_works_over_https_with_signatures() {
    let server = TestServer::builder()
        .tls()
        .credentials(
            "[[keys]]\naccess_key_id = \"TLSKEY\"\nsecret_access_key = \"tls-secret-0123456789\"\n\
             allow_queues = [\"*\"]\nallow_actions = [\"*\"]\n",
        )
        .start()
        .await;
    assert!(server.url().starts_with("https://127.0.0.1:"));
    let client = server.client_with_key("TLSKEY", "tls-secret-0123456789");
    let url = client
        .create_queue()
        .queue_name("secure")
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    assert!(
        url.starts_with("https://"),
        "queue URLs keep the scheme: {url}"
    );
    client
        .send_message()
        .queue_url(&url)
        .message_body("over TLS")
        .send()
        .await
        .unwrap();
    let received = client
        .receive_message()
        .queue_url(&url)
        .send()
        .await
        .unwrap();
    assert_eq!(received.messages()[0].body(), Some("over TLS"));
    // A plain-HTTP client gets no service from the TLS port.
    let mut plain = TcpStream::connect(server.url().trim_start_matches("https://"))
        .await
        .unwrap();
    plain
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .await
        .unwrap();
    let reply = read_until_closed(&mut plain).await;
    assert!(!reply.contains("200 OK"), "{reply}");
}
