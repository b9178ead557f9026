//! A webhook receiver counting what reaches it: every request, with its idempotency key, so a trial can
//! tell an alert lost from one received twice.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One request as it arrived.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Received {
    /// The `Idempotency-Key` header, if the request had one.
    pub key: Option<String>,
    /// The `event` of the alert's JSON body.
    pub event: String,
}

/// Listens on 127.0.0.1 until dropped (its thread ends with the process).
pub struct Receiver {
    pub port: u16,
    received: Arc<Mutex<Vec<Received>>>,
}

impl Receiver {
    pub fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let received = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&received);
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let sink = Arc::clone(&sink);
                std::thread::spawn(move || serve(stream, &sink));
            }
        });
        Self { port, received }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/hook", self.port)
    }

    pub fn received(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }

    /// How many requests carried each key.
    pub fn by_key(&self) -> BTreeMap<String, usize> {
        let mut counts = BTreeMap::new();
        for request in self.received() {
            *counts.entry(request.key.unwrap_or_default()).or_insert(0) += 1;
        }
        counts
    }
}

/// Reads the requests of one connection and answers each 200; a request cut short is not counted
/// (the sender saw no answer either, and tries again).
fn serve(stream: TcpStream, sink: &Mutex<Vec<Received>>) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(30)));
    let Ok(mut writer) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(stream);
    loop {
        let mut key = None;
        let mut length = 0usize;
        let mut line = String::new();
        let mut first = true;
        loop {
            line.clear();
            match reader.read_line(&mut line) {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
            let trimmed = line.trim_end();
            if trimmed.is_empty() {
                if first {
                    continue;
                }
                break;
            }
            first = false;
            if let Some((name, value)) = trimmed.split_once(':') {
                let value = value.trim().to_string();
                if name.eq_ignore_ascii_case("content-length") {
                    length = value.parse().unwrap_or(0);
                } else if name.eq_ignore_ascii_case("idempotency-key") {
                    key = Some(value);
                }
            }
        }
        let mut body = vec![0; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let event = serde_json::from_slice::<serde_json::Value>(&body)
            .ok()
            .and_then(|alert| alert["event"].as_str().map(str::to_string))
            .unwrap_or_default();
        sink.lock().unwrap().push(Received { key, event });
        let answer = "HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n";
        if writer.write_all(answer.as_bytes()).is_err() {
            return;
        }
    }
}
