//! Certificates: `ha-guard certs` and the development CA generated on first start.

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose,
    SanType,
};
use time::{Duration, OffsetDateTime};

#[derive(Debug, thiserror::Error)]
pub enum CertError {
    #[error("cannot generate a certificate: {0}")]
    Generate(#[from] rcgen::Error),
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("bad IP address {0:?}")]
    BadIp(String),
}

/// A CA and a serving certificate signed by it, in PEM; optionally a client certificate signed
/// by the same CA (for the apiserver, when the webhook runs with `--client-ca`).
pub struct Bundle {
    pub ca_pem: String,
    pub cert_pem: String,
    pub key_pem: String,
    pub client: Option<ClientCert>,
}

/// A client certificate (extended key usage clientAuth, common name `name`) and its key, in PEM.
pub struct ClientCert {
    pub name: String,
    pub cert_pem: String,
    pub key_pem: String,
}

/// The names a Kubernetes TLS Secret uses.
pub const CA_FILE: &str = "ca.crt";
pub const CERT_FILE: &str = "tls.crt";
pub const KEY_FILE: &str = "tls.key";
/// The client certificate and key `ha-guard certs --client NAME` writes beside them.
pub const CLIENT_CERT_FILE: &str = "client.crt";
pub const CLIENT_KEY_FILE: &str = "client.key";

/// A CA (10 years) and a serving certificate (1 year) for `dns` names and `ips`.
pub fn generate(dns: &[String], ips: &[IpAddr]) -> Result<Bundle, CertError> {
    generate_with_client(dns, ips, None)
}

/// [`generate`], and with `client` a client certificate (1 year) of that common name signed by
/// the same CA.
pub fn generate_with_client(dns: &[String], ips: &[IpAddr], client: Option<&str>) -> Result<Bundle, CertError> {
    let now = OffsetDateTime::now_utc();
    let mut ca = CertificateParams::new(Vec::<String>::new())?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca.distinguished_name.push(DnType::CommonName, "ha-guard CA");
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
    ca.not_before = now - Duration::hours(1);
    ca.not_after = now + Duration::days(3650);
    let ca_key = KeyPair::generate()?;
    let ca_cert = ca.self_signed(&ca_key)?;

    let mut leaf = CertificateParams::new(dns.to_vec())?;
    leaf.subject_alt_names.extend(ips.iter().map(|ip| SanType::IpAddress(*ip)));
    leaf.distinguished_name.push(DnType::CommonName, dns.first().map(String::as_str).unwrap_or("ha-guard"));
    leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    leaf.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
    leaf.not_before = now - Duration::hours(1);
    leaf.not_after = now + Duration::days(365);
    let key = KeyPair::generate()?;
    let issuer = Issuer::from_params(&ca, &ca_key);
    let cert = leaf.signed_by(&key, &issuer)?;

    let client = match client {
        None => None,
        Some(name) => {
            let mut params = CertificateParams::new(Vec::<String>::new())?;
            params.distinguished_name.push(DnType::CommonName, name);
            params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
            params.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
            params.not_before = now - Duration::hours(1);
            params.not_after = now + Duration::days(365);
            let client_key = KeyPair::generate()?;
            let client_cert = params.signed_by(&client_key, &issuer)?;
            Some(ClientCert {
                name: name.to_string(),
                cert_pem: client_cert.pem(),
                key_pem: client_key.serialize_pem(),
            })
        }
    };
    Ok(Bundle { ca_pem: ca_cert.pem(), cert_pem: cert.pem(), key_pem: key.serialize_pem(), client })
}

pub fn parse_ips(ips: &[String]) -> Result<Vec<IpAddr>, CertError> {
    ips.iter().map(|s| s.parse().map_err(|_| CertError::BadIp(s.clone()))).collect()
}

/// Writes `ca.crt`, `tls.crt`, `tls.key` into `dir` (the key readable by its owner only), and
/// `client.crt`, `client.key` when the bundle has a client certificate. Returns the paths written.
pub fn write(dir: &Path, bundle: &Bundle) -> Result<Vec<PathBuf>, CertError> {
    let io = |path: PathBuf| move |source| CertError::Io { path: path.clone(), source };
    std::fs::create_dir_all(dir).map_err(io(dir.to_path_buf()))?;
    let mut files =
        vec![(CA_FILE, &bundle.ca_pem, false), (CERT_FILE, &bundle.cert_pem, false), (KEY_FILE, &bundle.key_pem, true)];
    if let Some(c) = &bundle.client {
        files.push((CLIENT_CERT_FILE, &c.cert_pem, false));
        files.push((CLIENT_KEY_FILE, &c.key_pem, true));
    }
    let mut written = Vec::new();
    for (name, pem, secret) in files {
        let path = dir.join(name);
        std::fs::write(&path, pem).map_err(io(path.clone()))?;
        #[cfg(unix)]
        if secret {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).map_err(io(path.clone()))?;
        }
        #[cfg(not(unix))]
        let _ = secret;
        written.push(path);
    }
    Ok(written)
}
