//! Test certificates made at test time, and how a launched server uses them.
//!
//! [`TestCertificates::generate`] makes a fresh CA with `rcgen` and signs a
//! server certificate (for `localhost`, `127.0.0.1` and `::1`) and a client
//! certificate with it, as PEM files in a temp dir. Nothing is checked in and
//! no `openssl` binary is needed; each call makes a CA no other call trusts,
//! which is how a test gets a client that does not trust the server.

use super::{ServerError, write_private};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tempfile::TempDir;

/// The names the server certificate is valid for: every way a test reaches a
/// loopback server.
const SERVER_NAMES: [&str; 3] = ["localhost", "127.0.0.1", "::1"];

/// A CA with a server and a client certificate, as PEM files in a temp dir
/// that lives as long as any clone of this value.
///
/// | file | what |
/// |---|---|
/// | `ca.pem` | the CA certificate clients and servers trust |
/// | `server.pem`, `server-key.pem` | the server's certificate and key |
/// | `server-bundle.pem` | key and certificate in one file (ZooKeeper's PEM keystore) |
/// | `client.pem`, `client-key.pem` | a client certificate and key, for mutual TLS |
///
/// Keys are written readable by the owner only; `Debug` shows paths, never a key.
#[derive(Clone)]
pub struct TestCertificates {
    dir: Arc<TempDir>,
}

impl std::fmt::Debug for TestCertificates {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestCertificates")
            .field("dir", &self.dir.path())
            .finish()
    }
}

impl TestCertificates {
    /// Makes a new CA and signs a server and a client certificate with it.
    pub fn generate() -> Result<Self, ServerError> {
        let dir = tempfile::Builder::new()
            .prefix("distlock-tls-")
            .tempdir()
            .map_err(ServerError::io("create a temp dir for test certificates"))?;
        let pem = make_pems().map_err(|e| {
            ServerError::Protocol(format!("cannot make test certificates with rcgen: {e}"))
        })?;
        let path = dir.path();
        write_private(&path.join("ca.pem"), &pem.ca)?;
        write_private(&path.join("server.pem"), &pem.server)?;
        write_private(&path.join("server-key.pem"), &pem.server_key)?;
        write_private(
            &path.join("server-bundle.pem"),
            &format!("{}{}", pem.server_key, pem.server),
        )?;
        write_private(&path.join("client.pem"), &pem.client)?;
        write_private(&path.join("client-key.pem"), &pem.client_key)?;
        Ok(TestCertificates { dir: Arc::new(dir) })
    }

    /// The directory holding the files.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// `ca.pem`: the CA certificate.
    pub fn ca(&self) -> PathBuf {
        self.dir().join("ca.pem")
    }

    /// `server.pem`: the server certificate.
    pub fn server_cert(&self) -> PathBuf {
        self.dir().join("server.pem")
    }

    /// `server-key.pem`: the server's private key (PKCS#8).
    pub fn server_key(&self) -> PathBuf {
        self.dir().join("server-key.pem")
    }

    /// `server-bundle.pem`: the server's key followed by its certificate.
    pub fn server_bundle(&self) -> PathBuf {
        self.dir().join("server-bundle.pem")
    }

    /// `client.pem`: a client certificate signed by the CA.
    pub fn client_cert(&self) -> PathBuf {
        self.dir().join("client.pem")
    }

    /// `client-key.pem`: the client certificate's private key (PKCS#8).
    pub fn client_key(&self) -> PathBuf {
        self.dir().join("client-key.pem")
    }
}

/// How a launched server speaks TLS.
#[derive(Debug, Clone)]
pub struct ServerTls {
    /// The CA, server certificate and key the server uses.
    pub certificates: TestCertificates,
    /// Refuse clients that present no certificate signed by the CA.
    pub require_client_cert: bool,
}

impl ServerTls {
    /// TLS with fresh certificates; clients need no certificate of their own.
    pub fn generate() -> Result<Self, ServerError> {
        Ok(ServerTls {
            certificates: TestCertificates::generate()?,
            require_client_cert: false,
        })
    }

    /// The same, but clients must present a certificate signed by the CA.
    pub fn mutual() -> Result<Self, ServerError> {
        Ok(ServerTls {
            require_client_cert: true,
            ..Self::generate()?
        })
    }
}

impl ServerTls {
    /// redis.conf lines: a TLS port beside the plain one.
    pub(crate) fn redis_config(&self, tls_port: u16) -> String {
        let certs = &self.certificates;
        let auth = if self.require_client_cert {
            "yes"
        } else {
            "no"
        };
        format!(
            "tls-port {tls_port}\ntls-cert-file \"{}\"\ntls-key-file \"{}\"\n\
             tls-ca-cert-file \"{}\"\ntls-auth-clients {auth}\n",
            certs.server_cert().display(),
            certs.server_key().display(),
            certs.ca().display(),
        )
    }

    /// etcd flags for its `https://` client URLs. etcd 3.4 requires client
    /// certificates whenever it has a trusted CA, so the CA is given only when
    /// they are wanted.
    pub(crate) fn etcd_flags(&self) -> Vec<String> {
        let certs = &self.certificates;
        let mut flags = vec![
            format!("--cert-file={}", certs.server_cert().display()),
            format!("--key-file={}", certs.server_key().display()),
        ];
        if self.require_client_cert {
            flags.push(format!("--trusted-ca-file={}", certs.ca().display()));
            flags.push("--client-cert-auth=true".to_owned());
        }
        flags
    }

    /// zoo.cfg lines: a `secureClientPort` on Netty (the only connection
    /// factory that speaks TLS), with PEM key and trust stores (ZooKeeper 3.6+
    /// reads PEM, so no Java keystore is needed).
    pub(crate) fn zookeeper_config(&self, tls_port: u16) -> String {
        let certs = &self.certificates;
        let auth = if self.require_client_cert {
            "need"
        } else {
            "none"
        };
        format!(
            "secureClientPort={tls_port}\nsecureClientPortAddress=127.0.0.1\n\
             serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory\n\
             ssl.keyStore.location={}\nssl.keyStore.type=PEM\n\
             ssl.trustStore.location={}\nssl.trustStore.type=PEM\nssl.clientAuth={auth}\n",
            certs.server_bundle().display(),
            certs.ca().display(),
        )
    }

    /// mariadbd flags: TLS offered on the client port. MariaDB asks for client
    /// certificates per user (`REQUIRE X509`), not per server.
    pub(crate) fn mariadb_flags(&self) -> Vec<std::ffi::OsString> {
        let certs = &self.certificates;
        [
            ("--ssl-ca=", certs.ca()),
            ("--ssl-cert=", certs.server_cert()),
            ("--ssl-key=", certs.server_key()),
        ]
        .into_iter()
        .map(|(flag, path)| {
            let mut arg = std::ffi::OsString::from(flag);
            arg.push(path);
            arg
        })
        .collect()
    }
}

struct Pems {
    ca: String,
    server: String,
    server_key: String,
    client: String,
    client_key: String,
}

fn make_pems() -> Result<Pems, rcgen::Error> {
    let ca_key = KeyPair::generate()?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    // A name of its own: two test CAs with one name would look like one CA whose
    // signature is wrong, not like an unknown CA.
    let ca_name = format!("distlock test CA {:016x}", rand::random::<u64>());
    ca_params
        .distinguished_name
        .push(DnType::CommonName, ca_name);
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca = ca_params.self_signed(&ca_key)?;
    let issuer = Issuer::new(ca_params, ca_key);

    let leaf = |names: Vec<String>, common_name: &str, usages: Vec<ExtendedKeyUsagePurpose>| {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(names)?;
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = usages;
        let cert = params.signed_by(&key, &issuer)?;
        Ok::<_, rcgen::Error>((cert.pem(), key.serialize_pem()))
    };
    let names = SERVER_NAMES.iter().map(|name| (*name).to_owned()).collect();
    // The server certificate may also act as a client: etcd's gateway dials its
    // own TLS port with it.
    let both = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    let (server, server_key) = leaf(names, "localhost", both)?;
    let (client, client_key) = leaf(
        Vec::new(),
        "distlock-test-client",
        vec![ExtendedKeyUsagePurpose::ClientAuth],
    )?;
    Ok(Pems {
        ca: ca.pem(),
        server,
        server_key,
        client,
        client_key,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn every_file_is_written_private_and_each_call_makes_its_own_ca() {
        let one = TestCertificates::generate().unwrap();
        let other = TestCertificates::generate().unwrap();
        let files = [
            one.ca(),
            one.server_cert(),
            one.server_key(),
            one.server_bundle(),
            one.client_cert(),
            one.client_key(),
        ];
        for file in &files {
            let mode = std::fs::metadata(file).unwrap().permissions().mode();
            assert_eq!(mode & 0o077, 0, "{} is readable by others", file.display());
        }
        let read = |path: PathBuf| std::fs::read_to_string(path).unwrap();
        assert!(read(one.server_key()).contains("BEGIN PRIVATE KEY"));
        assert!(read(one.server_bundle()).contains("BEGIN CERTIFICATE"));
        assert_ne!(read(one.ca()), read(other.ca()));
        assert!(!format!("{one:?}").contains("PRIVATE"));
    }
}
