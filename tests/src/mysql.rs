//! MySQL: the three strategies as three backends (`mysql` = version_cas,
//! `mysql_unique_insert`, `mysql_for_update`), each on its own table of one
//! MariaDB server launched by the testkit (or `DISTLOCK_TEST_MYSQL_URL`).
//!
//! For `for_update` the inspector reads live state only: the rows,
//! `PROCESSLIST` and the holder's own session id, all visible to the test user
//! without PROCESS.

use crate::sql::sql_backend;
use distlock_mysql::{MySqlConfig, MySqlConnectOptions, Strategy};
use distlock_testkit::servers::MariaDbServer;

/// Each strategy and the name of its suite.
const SUITES: &[(Strategy, &str)] = &[
    (Strategy::VersionCas, "mysql"),
    (Strategy::UniqueInsert, "mysql_unique_insert"),
    (Strategy::ForUpdate, "mysql_for_update"),
];

sql_backend!(
    /// The MySQL adapter, as the SQL harness sees it.
    MySql("mysql", SUITES) = MariaDbServer, MySqlConfig, MySqlConnectOptions, Strategy
);
