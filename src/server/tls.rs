//! TLS material: loading PEM files into a rustls config, and re-reading them when their content
//! changes. Polling the content (not watching the path) sees a mounted Secret's atomic symlink
//! swap; new connections get the new certificate, connections in flight keep theirs.
//!
//! With a client CA (`serve --client-ca`), only callers presenting a certificate signed by it
//! complete the handshake; the CA file is polled and reloaded the same way.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rustls::ServerConfig;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use sha2::{Digest, Sha256};

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{path}: no PEM certificate in it ({detail})")]
    NoCertificate { path: PathBuf, detail: String },
    #[error("{path}: no PEM private key in it ({detail})")]
    NoKey { path: PathBuf, detail: String },
    #[error("{cert} / {key}: the certificate and key do not make a server identity: {detail}")]
    Config { cert: PathBuf, key: PathBuf, detail: String },
    #[error("{path}: not a usable client CA: {detail}")]
    ClientCa { path: PathBuf, detail: String },
}

/// The PEM material as read, with a digest to notice changes.
pub struct Material {
    pub certs: Vec<CertificateDer<'static>>,
    pub key: PrivateKeyDer<'static>,
    pub digest: [u8; 32],
    /// The leaf certificate's notAfter, seconds since the epoch (for the metric).
    pub not_after: Option<i64>,
}

/// Never prints the key.
impl std::fmt::Debug for Material {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Material")
            .field("certs", &self.certs.len())
            .field("key", &"<redacted>")
            .field("not_after", &self.not_after)
            .finish()
    }
}

pub fn read(cert: &Path, key: &Path) -> Result<Material, TlsError> {
    let cert_pem = std::fs::read(cert).map_err(|source| TlsError::Read { path: cert.into(), source })?;
    let key_pem = std::fs::read(key).map_err(|source| TlsError::Read { path: key.into(), source })?;
    let certs: Vec<_> = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<_, _>>()
        .map_err(|e| TlsError::NoCertificate { path: cert.into(), detail: e.to_string() })?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate { path: cert.into(), detail: "empty".into() });
    }
    let key_der = PrivateKeyDer::from_pem_slice(&key_pem)
        .map_err(|e| TlsError::NoKey { path: key.into(), detail: e.to_string() })?;
    let mut hasher = Sha256::new();
    hasher.update(&cert_pem);
    hasher.update(&key_pem);
    let not_after = not_after(&certs[0]);
    Ok(Material { certs, key: key_der, digest: hasher.finalize().into(), not_after })
}

/// The CAs whose certificates callers must present (`serve --client-ca`), as read.
pub struct ClientCa {
    pub path: PathBuf,
    pub roots: Arc<rustls::RootCertStore>,
    pub digest: [u8; 32],
}

impl std::fmt::Debug for ClientCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientCa").field("path", &self.path).field("roots", &self.roots.len()).finish()
    }
}

/// Reads a PEM bundle of one or more CA certificates. Every certificate in it must be usable as
/// a trust anchor; an empty or unparsable file is an error (never "trust nothing" by accident).
pub fn read_client_ca(path: &Path) -> Result<ClientCa, TlsError> {
    let bad = |detail: String| TlsError::ClientCa { path: path.into(), detail };
    let pem = std::fs::read(path).map_err(|source| TlsError::Read { path: path.into(), source })?;
    let certs: Vec<_> =
        CertificateDer::pem_slice_iter(&pem).collect::<Result<_, _>>().map_err(|e| bad(e.to_string()))?;
    if certs.is_empty() {
        return Err(bad("no PEM certificate in it".into()));
    }
    let mut roots = rustls::RootCertStore::empty();
    for (i, cert) in certs.into_iter().enumerate() {
        roots.add(cert).map_err(|e| bad(format!("certificate {}: {e}", i + 1)))?;
    }
    Ok(ClientCa { path: path.into(), roots: Arc::new(roots), digest: Sha256::digest(&pem).into() })
}

/// TLS 1.2 and 1.3 only (rustls supports nothing older), HTTP/2 and HTTP/1.1 by ALPN. No client
/// certificate is asked for.
pub fn server_config(m: &Material, cert: &Path, key: &Path) -> Result<Arc<ServerConfig>, TlsError> {
    server_config_with(m, None, cert, key)
}

/// [`server_config`], and with `client_ca` every caller must present a certificate signed by one
/// of its CAs (and valid for client authentication): the handshake fails otherwise.
pub fn server_config_with(
    m: &Material,
    client_ca: Option<&ClientCa>,
    cert: &Path,
    key: &Path,
) -> Result<Arc<ServerConfig>, TlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| TlsError::Config { cert: cert.into(), key: key.into(), detail: e.to_string() })?;
    let builder = match client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(ca.roots.clone(), provider)
                .build()
                .map_err(|e| TlsError::ClientCa { path: ca.path.clone(), detail: e.to_string() })?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder.with_single_cert(m.certs.clone(), m.key.clone_key()).map_err(|e| TlsError::Config {
        cert: cert.into(),
        key: key.into(),
        detail: e.to_string(),
    })?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// notAfter of a DER certificate, seconds since the epoch.
pub fn not_after(cert: &CertificateDer<'_>) -> Option<i64> {
    let (_, parsed) = x509_parser::parse_x509_certificate(cert.as_ref()).ok()?;
    Some(parsed.validity().not_after.timestamp())
}

/// How often the files are polled.
pub const DEFAULT_POLL: Duration = Duration::from_secs(5);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_generated_material_and_its_expiry() {
        let dir = tempfile::tempdir().unwrap();
        let bundle = crate::server::certs::generate(&["localhost".into()], &[]).unwrap();
        crate::server::certs::write(dir.path(), &bundle).unwrap();
        let (c, k) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
        let m = read(&c, &k).unwrap();
        assert!(server_config(&m, &c, &k).is_ok());
        let in_a_year = time::OffsetDateTime::now_utc().unix_timestamp() + 365 * 86400;
        let not_after = m.not_after.expect("notAfter parsed");
        assert!((not_after - in_a_year).abs() < 2 * 3600, "{not_after} vs {in_a_year}");
    }

    #[test]
    fn not_after_is_the_certificates_to_the_second() {
        let at = |t: i64| time::OffsetDateTime::from_unix_timestamp(t).unwrap();
        let ca = crate::server::certs::Ca::generate("test CA", at(1_700_000_000), at(2_000_000_000)).unwrap();
        let (cert, _) = ca.issue_serving(&["localhost".into()], &[], at(1_800_000_000), at(1_900_000_123)).unwrap();
        let der = CertificateDer::pem_slice_iter(cert.as_bytes()).next().unwrap().unwrap();
        assert_eq!(not_after(&der), Some(1_900_000_123));
        // Capped at the CA's notAfter.
        let (cert, _) = ca.issue_serving(&["localhost".into()], &[], at(1_800_000_000), at(2_100_000_000)).unwrap();
        let der = CertificateDer::pem_slice_iter(cert.as_bytes()).next().unwrap().unwrap();
        assert_eq!(not_after(&der), Some(2_000_000_000));
        assert_eq!(not_after(&CertificateDer::from(vec![0x30, 0x03, 0x02, 0x01, 0x00])), None, "not a certificate");
    }

    #[test]
    fn bad_files_name_the_path() {
        let dir = tempfile::tempdir().unwrap();
        let c = dir.path().join("tls.crt");
        std::fs::write(&c, "not pem").unwrap();
        let e = read(&c, &dir.path().join("missing.key")).unwrap_err().to_string();
        assert!(e.contains("missing.key"), "{e}");
        std::fs::write(dir.path().join("k"), "not pem").unwrap();
        let e = read(&c, &dir.path().join("k")).unwrap_err().to_string();
        assert!(e.contains("tls.crt") && e.contains("no PEM certificate"), "{e}");
    }
}
