//! Logins in the redb file: table `logins` maps a login name to its version (8 bytes,
//! little-endian) followed by the stored bytes. Each read and each compare-and-set is one
//! transaction of its own, run off the async workers; the write is committed (durably, redb's
//! default) before the caller learns its new version.

use std::fmt;

use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition, TableError};

use super::RedbStore;
use crate::{StoreError, StoreFuture, StoredLogin};

const LOGINS: TableDefinition<'static, &str, &[u8]> = TableDefinition::new("logins");

fn io(op: &'static str) -> impl Fn(&dyn fmt::Display) -> StoreError {
    move |e| StoreError::Io {
        op,
        reason: e.to_string(),
    }
}

/// A stored value as `(version, bytes)`; `None` when it is too short to hold a version.
fn decode(value: &[u8]) -> Option<StoredLogin> {
    let (version, data) = value.split_first_chunk::<8>()?;
    Some(StoredLogin {
        version: u64::from_le_bytes(*version),
        data: data.to_vec(),
    })
}

fn read(db: &Database, name: &str) -> Result<Option<StoredLogin>, StoreError> {
    let fail = io("login");
    let r = db.begin_read().map_err(|e| fail(&e))?;
    let table = match r.open_table(LOGINS) {
        Ok(t) => t,
        // No login was ever written to this file.
        Err(TableError::TableDoesNotExist(_)) => return Ok(None),
        Err(e) => return Err(fail(&e)),
    };
    let value = table.get(name).map_err(|e| fail(&e))?;
    match value {
        None => Ok(None),
        Some(v) => decode(v.value())
            .map(Some)
            .ok_or_else(|| StoreError::Corrupt {
                key: format!("login {name}"),
                expected: "a version of 8 bytes and the login's bytes",
                found: format!("{} bytes", v.value().len()),
            }),
    }
}

fn compare_and_set(
    db: &Database,
    name: &str,
    expected: u64,
    data: &[u8],
) -> Result<Option<u64>, StoreError> {
    let fail = io("put_login");
    let w = db.begin_write().map_err(|e| fail(&e))?;
    let written = {
        let mut table = w.open_table(LOGINS).map_err(|e| fail(&e))?;
        let current = table
            .get(name)
            .map_err(|e| fail(&e))?
            // A value too short to read counts as none: a write replaces it.
            .and_then(|v| decode(v.value()).map(|l| l.version))
            .unwrap_or(0);
        if current != expected {
            None
        } else {
            let version = current + 1;
            let mut value = Vec::with_capacity(8 + data.len());
            value.extend_from_slice(&version.to_le_bytes());
            value.extend_from_slice(data);
            table.insert(name, value.as_slice()).map_err(|e| fail(&e))?;
            Some(version)
        }
    };
    match written {
        Some(version) => {
            w.commit().map_err(|e| fail(&e))?;
            Ok(Some(version))
        }
        None => {
            w.abort().map_err(|e| fail(&e))?;
            Ok(None)
        }
    }
}

impl RedbStore {
    pub(super) fn login_now(&self, name: &str) -> StoreFuture<'static, Option<StoredLogin>> {
        let db = self.db("login");
        let name = name.to_owned();
        Box::pin(async move {
            let db = db?;
            tokio::task::spawn_blocking(move || read(&db, &name))
                .await
                .map_err(|_| StoreError::Closed)?
        })
    }

    pub(super) fn put_login_now(
        &self,
        name: &str,
        expected: u64,
        data: &[u8],
    ) -> StoreFuture<'static, Option<u64>> {
        // A broken file (after an I/O error) takes no write until the writer has reopened it.
        let db = self
            .inner
            .db
            .health("put_login")
            .and_then(|()| self.db("put_login"));
        let (name, data) = (name.to_owned(), data.to_vec());
        Box::pin(async move {
            let db = db?;
            tokio::task::spawn_blocking(move || compare_and_set(&db, &name, expected, &data))
                .await
                .map_err(|_| StoreError::Closed)?
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_values_are_refused_not_panicked_on() {
        assert_eq!(decode(&[1, 2, 3]), None);
        let l = decode(&[2, 0, 0, 0, 0, 0, 0, 0, b'x']).unwrap();
        assert_eq!((l.version, l.data), (2, b"x".to_vec()));
    }
}
