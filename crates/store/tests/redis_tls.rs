//! `rediss://`: the Redis backend over TLS, against a `redis-server` serving a certificate made
//! here (a CA and a leaf for 127.0.0.1), trusted through `root_certificates`.
#![cfg(feature = "redis")]

use std::process::Child;
use std::time::{Duration, SystemTime};

use context_relay_core::{Handoff, HandoffKey, HandoffRecord};
use context_relay_store::{HandoffStore, RedisStore};
use context_relay_testkit::redis_server::{free_port, spawn_ready};
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};

struct TlsRedis {
    child: Child,
    port: u16,
    ca_pem: String,
    _dir: tempfile::TempDir,
}

impl Drop for TlsRedis {
    fn drop(&mut self) {
        self.child.kill().ok();
        self.child.wait().ok();
    }
}

fn start_tls_redis() -> TlsRedis {
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();
    let leaf_key = KeyPair::generate().unwrap();
    let leaf = CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
        .unwrap()
        .signed_by(&leaf_key, &ca)
        .unwrap();

    let dir = tempfile::tempdir().unwrap();
    let cert = dir.path().join("server.crt");
    let key = dir.path().join("server.key");
    let ca_file = dir.path().join("ca.crt");
    std::fs::write(&cert, leaf.pem()).unwrap();
    std::fs::write(&key, leaf_key.serialize_pem()).unwrap();
    std::fs::write(&ca_file, ca.pem()).unwrap();

    let port = free_port();
    let (cert, key, ca_file) = (
        cert.to_string_lossy(),
        key.to_string_lossy(),
        ca_file.to_string_lossy(),
    );
    let child = spawn_ready(
        port,
        &[
            "--port",
            "0",
            "--tls-port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--tls-cert-file",
            &cert,
            "--tls-key-file",
            &key,
            "--tls-ca-cert-file",
            &ca_file,
            "--tls-auth-clients",
            "no",
        ],
    );
    TlsRedis {
        child,
        port,
        ca_pem: ca.pem(),
        _dir: dir,
    }
}

fn record(key: &HandoffKey) -> HandoffRecord {
    let now = SystemTime::now();
    HandoffRecord {
        version: 1,
        kind: Default::default(),
        tenant: key.tenant.clone(),
        session: key.session.clone(),
        combo: key.combo.clone(),
        from_provider: "codex".into(),
        from_account: "acct-a".into(),
        handoff: Handoff {
            summary: "over TLS".into(),
            ..Handoff::default()
        },
        message_count: 5,
        conversation: None,
        compaction: false,
        model: "gpt-5.5".into(),
        threshold: 0.85,
        generated_at: now,
        expires_at: now + Duration::from_secs(600),
    }
}

#[tokio::test]
async fn rediss_round_trip_with_a_private_ca() {
    let server = start_tls_redis();
    let url = format!("rediss://127.0.0.1:{}/", server.port);
    let store = RedisStore::builder(&url)
        .root_certificates(server.ca_pem.as_bytes())
        .prefix("tls-test:")
        .connect()
        .await
        .expect("TLS connection with the test CA");
    let key = HandoffKey::new("t", "s", "c");
    store.upsert(record(&key)).await.unwrap();
    let got = store.get(&key).await.unwrap().expect("stored over TLS");
    assert_eq!(got.handoff.summary, "over TLS");

    // The same server without the CA: the web roots do not trust it, so no connection.
    let refused = RedisStore::builder(&url)
        .timeout(Duration::from_secs(2))
        .connect()
        .await;
    assert!(refused.is_err(), "an untrusted certificate must be refused");
    // And plain redis:// on the TLS port is no Redis either.
    let plain = RedisStore::builder(format!("redis://127.0.0.1:{}/", server.port))
        .timeout(Duration::from_millis(500))
        .connect()
        .await;
    if let Ok(plain) = plain {
        assert!(plain.get(&key).await.is_err());
    }
}
