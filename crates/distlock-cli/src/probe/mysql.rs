//! MySQL / MariaDB: `SELECT 1` as the raw round trip, server version, InnoDB and
//! read-only checks for pitfalls, deletion of the lock row (not for
//! `for_update`, whose lock is a live transaction rather than a row).

use super::url::parse;
use super::{Probe, version};
use async_trait::async_trait;
use distlock::LockKey;
use distlock::mysql::{MySqlConfig, Strategy, TableName, row_name};
use sqlx::mysql::{MySqlConnectOptions, MySqlPool, MySqlPoolOptions};
use std::str::FromStr;

/// The adapter's own URL parameters; sqlx gets the rest.
const ADAPTER_PARAMS: [&str; 6] = [
    "table",
    "strategy",
    "pool_size",
    "connect_timeout",
    "request_timeout",
    "create_table",
];

pub struct MySqlProbe {
    pool: MySqlPool,
    table: TableName,
    strategy: Strategy,
}

impl MySqlProbe {
    pub async fn connect(url: &str) -> Result<Self, String> {
        let config = MySqlConfig::from_url(url.trim()).map_err(|e| e.to_string())?;
        let parts = parse(url);
        let table = TableName::new(parts.param("table").unwrap_or(TableName::DEFAULT))
            .map_err(|e| e.to_string())?;
        let rest = url.trim().split_once("://").map_or("", |(_, rest)| rest);
        let (base, query) = rest.split_once('?').unwrap_or((rest, ""));
        let passed: Vec<&str> = query
            .split('&')
            .filter(|pair| !pair.is_empty())
            .filter(|pair| !ADAPTER_PARAMS.contains(&pair.split('=').next().unwrap_or_default()))
            .collect();
        let sqlx_url = match passed.is_empty() {
            true => format!("mysql://{base}"),
            false => format!("mysql://{base}?{}", passed.join("&")),
        };
        let options = MySqlConnectOptions::from_str(&sqlx_url).map_err(|e| e.to_string())?;
        let pool = MySqlPoolOptions::new()
            .max_connections(1)
            .acquire_timeout(super::CONNECT_TIMEOUT)
            .connect_with(options)
            .await
            .map_err(|e| e.to_string())?;
        Ok(MySqlProbe {
            pool,
            table,
            strategy: config.get_strategy(),
        })
    }

    async fn scalar(&self, sql: &'static str) -> Result<Option<String>, sqlx::Error> {
        sqlx::query_scalar::<_, Option<String>>(sql)
            .fetch_optional(&self.pool)
            .await
            .map(Option::flatten)
    }
}

#[async_trait]
impl Probe for MySqlProbe {
    fn round_trip_name(&self) -> Option<&'static str> {
        Some("SELECT 1")
    }

    async fn round_trip(&self) -> Result<(), String> {
        sqlx::query("SELECT 1")
            .execute(&self.pool)
            .await
            .map(drop)
            .map_err(|e| e.to_string())
    }

    async fn pitfalls(&self) -> Vec<String> {
        let mut warnings = Vec::new();
        let server = self
            .scalar("SELECT VERSION()")
            .await
            .ok()
            .flatten()
            .unwrap_or_default();
        let mariadb = server.to_ascii_lowercase().contains("mariadb");
        match (version(&server), mariadb) {
            (Some(v), true) if v < (10, 6, 0) => warnings.push(format!(
                "MariaDB {server} is older than 10.6, which the adapter needs (NOWAIT, SKIP LOCKED semantics, \
                 TIMESTAMP(6) handling); upgrade"
            )),
            (Some(v), false) if v < (8, 0, 0) => {
                warnings.push(format!("MySQL {server} is older than 8.0, which the adapter needs; upgrade"))
            }
            (None, _) => warnings.push(format!("cannot read the server version ({server:?})")),
            _ => {}
        }
        let innodb = self
            .scalar("SELECT SUPPORT FROM information_schema.ENGINES WHERE ENGINE = 'InnoDB'")
            .await;
        match innodb {
            Ok(Some(support)) if support == "YES" || support == "DEFAULT" => {}
            Ok(_) => warnings.push(
                "InnoDB is not available: lock rows need a transactional engine with row locks \
                 (MyISAM or MEMORY tables lose locks and counters, and for_update cannot work)"
                    .into(),
            ),
            Err(e) => warnings.push(format!("cannot check for InnoDB: {e}")),
        }
        let engine = sqlx::query_scalar::<_, Option<String>>(
            "SELECT ENGINE FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?",
        )
        .bind(self.table.as_str())
        .fetch_optional(&self.pool)
        .await;
        if let Ok(Some(Some(engine))) = engine
            && !engine.eq_ignore_ascii_case("InnoDB")
        {
            warnings.push(format!(
                "the lock table `{}` uses the {engine} engine, not InnoDB: it has no transactions or row \
                 locks, so locks and fence counters are not safe; ALTER TABLE `{}` ENGINE=InnoDB",
                self.table.as_str(),
                self.table.as_str()
            ));
        }
        if self
            .scalar("SELECT @@global.read_only")
            .await
            .ok()
            .flatten()
            .as_deref()
            == Some("1")
        {
            warnings
                .push("the server is read-only (a replica?): point the lock at the primary".into());
        }
        warnings
    }

    async fn delete_lock(&self, key: &LockKey) -> Result<bool, String> {
        if self.strategy == Strategy::ForUpdate {
            return Err(
                "for_update locks are transactions on a live connection: an operator ends one by \
                        killing that connection, which this check does not do to your server"
                    .into(),
            );
        }
        // The table name passed TableName's identifier check: nothing else is spliced in.
        let sql = format!("DELETE FROM `{}` WHERE name = ?", self.table.as_str());
        let deleted = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(row_name(key))
            .execute(&self.pool)
            .await
            .map_err(|e| e.to_string())?;
        Ok(deleted.rows_affected() > 0)
    }
}
