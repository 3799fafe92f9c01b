//! The docker compose files parse, define every service the suite needs with a
//! healthcheck and a fixed loopback port, and agree with the ports `just
//! test-compose-servers` points the suite at. No Docker engine is needed: this reads files.
#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)] // test code: failing loudly is the point

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use yaml_rust2::{Yaml, YamlLoader};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn load(file: &str) -> Yaml {
    let path = repo().join("docker").join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut docs = YamlLoader::load_from_str(&text)
        .unwrap_or_else(|e| panic!("{file} is not valid YAML: {e}"));
    assert_eq!(docs.len(), 1, "{file}: one YAML document expected");
    docs.remove(0)
}

/// Every topology the suite knows: file → (service, container port, host port).
fn expected() -> BTreeMap<&'static str, Vec<(&'static str, u16, u16)>> {
    BTreeMap::from([
        ("redis.yml", vec![("redis", 6379, 16379)]),
        (
            "redlock.yml",
            (1..=5)
                .map(|i| {
                    (
                        ["redis-1", "redis-2", "redis-3", "redis-4", "redis-5"][i - 1],
                        6379,
                        16380 + i as u16,
                    )
                })
                .collect(),
        ),
        ("etcd.yml", vec![("etcd", 2379, 12379)]),
        (
            "etcd-cluster.yml",
            vec![
                ("etcd-1", 2379, 12381),
                ("etcd-2", 2379, 12382),
                ("etcd-3", 2379, 12383),
            ],
        ),
        ("zookeeper.yml", vec![("zookeeper", 2181, 12181)]),
        ("mysql.yml", vec![("mysql", 3306, 13306)]),
        ("mariadb.yml", vec![("mariadb", 3306, 13307)]),
        ("postgres.yml", vec![("postgres", 5432, 15432)]),
    ])
}

#[test]
fn every_topology_has_its_services_with_healthchecks_on_fixed_loopback_ports() {
    for (file, services) in expected() {
        let doc = load(file);
        let defined = doc["services"]
            .as_hash()
            .unwrap_or_else(|| panic!("{file}: no services"));
        assert_eq!(defined.len(), services.len(), "{file}: unexpected services");
        for (name, container, host) in services {
            let service = &doc["services"][name];
            assert!(!service.is_badvalue(), "{file}: service {name} missing");
            assert!(
                service["image"].as_str().is_some_and(|i| i.contains(':')),
                "{file}/{name}: pin an image tag"
            );
            let test = &service["healthcheck"]["test"];
            let has_test = match test {
                Yaml::Array(parts) => {
                    parts.len() >= 2 && parts[0].as_str().is_some_and(|p| p.starts_with("CMD"))
                }
                Yaml::String(command) => !command.is_empty(),
                _ => false,
            };
            assert!(has_test, "{file}/{name}: healthcheck.test missing");
            for field in ["interval", "timeout", "retries"] {
                assert!(
                    !service["healthcheck"][field].is_badvalue(),
                    "{file}/{name}: healthcheck.{field}"
                );
            }
            let ports: Vec<&str> = service["ports"]
                .as_vec()
                .unwrap()
                .iter()
                .filter_map(Yaml::as_str)
                .collect();
            assert_eq!(
                ports,
                [format!("127.0.0.1:{host}:{container}")],
                "{file}/{name}: ports"
            );
        }
    }
}

#[test]
fn no_compose_file_is_left_unchecked() {
    let mut found: Vec<String> = std::fs::read_dir(repo().join("docker"))
        .unwrap()
        .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
        .filter(|name| name.ends_with(".yml") || name.ends_with(".yaml"))
        .collect();
    found.sort();
    let known: Vec<String> = expected().keys().map(|k| (*k).to_owned()).collect();
    assert_eq!(found, known);
}

#[test]
fn host_ports_are_unique_across_topologies() {
    let mut seen = BTreeMap::new();
    for (file, services) in expected() {
        for (name, _, host) in services {
            if let Some(other) = seen.insert(host, format!("{file}/{name}")) {
                panic!("port {host} used by {other} and {file}/{name}");
            }
        }
    }
}

/// `just test-compose-servers` must point each `DISTLOCK_TEST_<BACKEND>_URL` at a port a
/// compose file publishes.
#[test]
fn test_compose_servers_recipe_uses_the_published_ports() {
    let justfile = std::fs::read_to_string(repo().join("justfile")).unwrap();
    let recipe = justfile
        .split("\ntest-compose-servers:")
        .nth(1)
        .expect("justfile has a test-compose-servers recipe");
    let recipe: String = recipe
        .lines()
        .take_while(|l| l.is_empty() || l.starts_with(' ') || l.starts_with('\t'))
        .collect::<Vec<_>>()
        .join("\n");
    let published: Vec<u16> = expected()
        .values()
        .flatten()
        .map(|(_, _, host)| *host)
        .collect();
    for backend in ["REDIS", "REDLOCK", "ETCD", "ZOOKEEPER", "MYSQL", "POSTGRES"] {
        assert!(
            recipe.contains(&format!("DISTLOCK_TEST_{backend}_URL=")),
            "test-compose-servers sets no {backend} URL"
        );
    }
    let mut used = 0;
    for part in recipe.split("127.0.0.1:").skip(1) {
        let port: u16 = part
            .chars()
            .take_while(char::is_ascii_digit)
            .collect::<String>()
            .parse()
            .unwrap();
        assert!(
            published.contains(&port),
            "test-compose-servers uses port {port}, which no compose file publishes"
        );
        used += 1;
    }
    assert!(
        used >= 5,
        "test-compose-servers names too few servers:\n{recipe}"
    );
}
