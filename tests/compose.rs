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

/// Every compose file: docker/*.yml and a server's docker/images/<server>/compose.yml,
/// by path under docker/.
fn files() -> BTreeMap<String, Yaml> {
    let names = |dir: &str| -> Vec<String> {
        std::fs::read_dir(repo().join("docker").join(dir))
            .unwrap()
            .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
            .collect()
    };
    let top = names("")
        .into_iter()
        .filter(|name| name.ends_with(".yml") || name.ends_with(".yaml"));
    let beside_images = names("images")
        .into_iter()
        .map(|server| format!("images/{server}/compose.yml"))
        .filter(|file| repo().join("docker").join(file).is_file());
    top.chain(beside_images)
        .map(|name| {
            let doc = load(&name);
            (name, doc)
        })
        .collect()
}

/// The URL a docker/images/<server>/compose.yml gives `just test-compose-servers`
/// (`x-distlock-test-url`), by the variable the recipe sets from it.
fn test_urls_beside_images() -> BTreeMap<String, String> {
    files()
        .iter()
        .filter_map(|(file, doc)| {
            let server = file.strip_prefix("images/")?.strip_suffix("/compose.yml")?;
            let url = doc["x-distlock-test-url"].as_str()?;
            let variable = format!("DISTLOCK_TEST_{}_URL", server.to_ascii_uppercase());
            Some((variable, url.to_owned()))
        })
        .collect()
}

/// Every service of every compose file: (file/service, its definition).
fn services() -> Vec<(String, Yaml)> {
    files()
        .into_iter()
        .flat_map(|(file, doc)| {
            let services = doc["services"]
                .as_hash()
                .unwrap_or_else(|| panic!("{file}: no services"))
                .clone();
            services.into_iter().map(move |(name, service)| {
                let name = name
                    .as_str()
                    .unwrap_or_else(|| panic!("{file}: a service name"));
                (format!("{file}/{name}"), service)
            })
        })
        .collect()
}

/// The one host port a service publishes, checked to be on loopback only.
fn host_port(name: &str, service: &Yaml) -> u16 {
    let ports: Vec<&str> = service["ports"]
        .as_vec()
        .unwrap_or_else(|| panic!("{name}: no ports"))
        .iter()
        .filter_map(Yaml::as_str)
        .collect();
    let [port] = ports[..] else {
        panic!("{name}: publish exactly one port, have {ports:?}");
    };
    let (host, container) = port
        .strip_prefix("127.0.0.1:")
        .and_then(|rest| rest.split_once(':'))
        .unwrap_or_else(|| {
            panic!("{name}: publish on 127.0.0.1 only, as 127.0.0.1:HOST:CONTAINER")
        });
    assert!(
        container.parse::<u16>().is_ok(),
        "{name}: container port {container}"
    );
    host.parse()
        .unwrap_or_else(|_| panic!("{name}: host port {host}"))
}

#[test]
fn every_service_has_a_pinned_image_a_healthcheck_and_a_fixed_loopback_port() {
    for (name, service) in services() {
        assert!(
            service["image"].as_str().is_some_and(|i| i.contains(':')),
            "{name}: pin an image tag"
        );
        let test = &service["healthcheck"]["test"];
        let has_test = match test {
            Yaml::Array(parts) => {
                parts.len() >= 2 && parts[0].as_str().is_some_and(|p| p.starts_with("CMD"))
            }
            Yaml::String(command) => !command.is_empty(),
            _ => false,
        };
        assert!(has_test, "{name}: healthcheck.test missing");
        for field in ["interval", "timeout", "retries"] {
            assert!(
                !service["healthcheck"][field].is_badvalue(),
                "{name}: healthcheck.{field}"
            );
        }
        host_port(&name, &service);
    }
}

#[test]
fn host_ports_are_unique_across_topologies() {
    let mut seen = BTreeMap::new();
    for (name, service) in services() {
        let host = host_port(&name, &service);
        if let Some(other) = seen.insert(host, name.clone()) {
            panic!("port {host} used by {other} and {name}");
        }
    }
}

/// `just test-compose-servers` must point each registered backend's
/// `DISTLOCK_TEST_<BACKEND>_URL` at a port a compose file publishes: set in the
/// recipe, or by a compose file beside its image (`x-distlock-test-url`).
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
    assert!(
        recipe.contains("x-distlock-test-url"),
        "test-compose-servers no longer reads x-distlock-test-url"
    );
    let recipe = test_urls_beside_images()
        .iter()
        .fold(recipe, |recipe, (variable, url)| {
            format!("{recipe}\n{variable}={url}")
        });
    let published: Vec<u16> = services()
        .iter()
        .map(|(name, service)| host_port(name, service))
        .collect();
    let backends: Vec<String> = distlock::BackendKind::all()
        .filter(|kind| kind.feature().is_some())
        .map(|kind| kind.name().to_ascii_uppercase())
        .collect();
    for backend in &backends {
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
        used >= backends.len(),
        "test-compose-servers names too few servers:\n{recipe}"
    );
}
