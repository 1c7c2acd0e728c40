//! Certificates: `ha-guard certs`, the development CA generated on first start, and the issuing
//! that `--tls-mode managed` ([`super::managed_tls`]) builds on. A CA's key is kept beside its
//! certificate (`ca.key`), so that a serving certificate can be re-issued from the CA the
//! webhook configurations' `caBundle` already trusts.

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
    /// The CA in a directory cannot be used as it is; the message says what to do.
    #[error("{0}")]
    Ca(String),
}

/// A CA and a serving certificate signed by it, in PEM; optionally a client certificate signed
/// by the same CA (for the apiserver, when the webhook runs with `--client-ca`).
pub struct Bundle {
    pub ca_pem: String,
    /// The CA's private key, so that later certificates can come from the same CA.
    pub ca_key_pem: String,
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
/// The CA's key, kept beside `ca.crt` (as cert-manager's CA issuer and Kyverno keep theirs).
pub const CA_KEY_FILE: &str = "ca.key";
/// The client certificate and key `ha-guard certs --client NAME` writes beside them.
pub const CLIENT_CERT_FILE: &str = "client.crt";
pub const CLIENT_KEY_FILE: &str = "client.key";

/// Validity of the CA `ha-guard certs` and the development certificates make.
pub const CA_DAYS: i64 = 3650;
/// Validity of the serving and client certificates `ha-guard certs` makes.
pub const LEAF_DAYS: i64 = 365;

/// How long what `ha-guard certs` issues is valid: the serving (and client) certificate, and a new
/// CA (a kept CA keeps its own; a certificate never outlives its CA).
#[derive(Clone, Copy, Debug)]
pub struct Validity {
    pub cert: Duration,
    pub ca: Duration,
}

impl Default for Validity {
    fn default() -> Self {
        Validity { cert: Duration::days(LEAF_DAYS), ca: Duration::days(CA_DAYS) }
    }
}

/// A CA that can sign: its certificate and key (PEM), and its notAfter.
pub struct Ca {
    pub cert_pem: String,
    pub key_pem: String,
    pub not_after: OffsetDateTime,
    issuer: Issuer<'static, KeyPair>,
}

impl std::fmt::Debug for Ca {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ca").field("not_after", &self.not_after).field("key", &"<redacted>").finish()
    }
}

impl Ca {
    /// A new self-signed CA named `common_name`, valid from `not_before` to `not_after`. It signs
    /// end-entity certificates only (path length 0).
    pub fn generate(common_name: &str, not_before: OffsetDateTime, not_after: OffsetDateTime) -> Result<Ca, CertError> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.distinguished_name.push(DnType::CommonName, common_name);
        params.key_usages =
            vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
        params.not_before = not_before;
        params.not_after = not_after;
        let key = KeyPair::generate()?;
        let cert_pem = params.self_signed(&key)?.pem();
        let key_pem = key.serialize_pem();
        Ok(Ca { cert_pem, key_pem, not_after, issuer: Issuer::new(params, key) })
    }

    /// The CA of the first certificate in `cert_pem` (a bundle may follow it) and `key_pem`. The
    /// error says what is wrong (not a certificate, not a CA, a key that does not match it); the
    /// caller names where they came from.
    pub fn from_pem(cert_pem: &str, key_pem: &str) -> Result<Ca, String> {
        use rustls_pki_types::CertificateDer;
        use rustls_pki_types::pem::PemObject;
        let der = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
            .next()
            .ok_or("no PEM certificate in it")?
            .map_err(|e| format!("not PEM: {e}"))?;
        let (_, cert) = x509_parser::parse_x509_certificate(&der).map_err(|e| format!("not a certificate: {e}"))?;
        if !cert.is_ca() {
            return Err("its first certificate is not a CA (no basicConstraints cA: true)".into());
        }
        let key = KeyPair::from_pem(key_pem).map_err(|e| format!("the key is not a usable PEM private key: {e}"))?;
        if key.public_key_raw() != cert.public_key().subject_public_key.data.as_ref() {
            return Err("the key does not belong to the CA certificate".into());
        }
        let not_after = OffsetDateTime::from_unix_timestamp(cert.validity().not_after.timestamp())
            .map_err(|e| format!("notAfter: {e}"))?;
        let pem = pem_of("CERTIFICATE", der.as_ref());
        let issuer = Issuer::from_ca_cert_der(&der, key).map_err(|e| format!("cannot sign with it: {e}"))?;
        Ok(Ca { cert_pem: pem, key_pem: key_pem.to_string(), not_after, issuer })
    }

    /// A serving certificate (serverAuth) for `dns` and `ips` and its key, in PEM; its notAfter is
    /// `not_after` or the CA's, whichever comes first (a certificate never outlives its CA).
    pub fn issue_serving(
        &self,
        dns: &[String],
        ips: &[IpAddr],
        not_before: OffsetDateTime,
        not_after: OffsetDateTime,
    ) -> Result<(String, String), CertError> {
        let mut leaf = CertificateParams::new(dns.to_vec())?;
        leaf.subject_alt_names.extend(ips.iter().map(|ip| SanType::IpAddress(*ip)));
        leaf.distinguished_name.push(DnType::CommonName, dns.first().map(String::as_str).unwrap_or("ha-guard"));
        leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        leaf.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
        leaf.not_before = not_before;
        leaf.not_after = not_after.min(self.not_after);
        let key = KeyPair::generate()?;
        let cert = leaf.signed_by(&key, &self.issuer)?;
        Ok((cert.pem(), key.serialize_pem()))
    }

    /// A client certificate (clientAuth) of common name `name`, signed by this CA.
    pub fn issue_client(
        &self,
        name: &str,
        not_before: OffsetDateTime,
        not_after: OffsetDateTime,
    ) -> Result<ClientCert, CertError> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.distinguished_name.push(DnType::CommonName, name);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
        params.not_before = not_before;
        params.not_after = not_after.min(self.not_after);
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok(ClientCert { name: name.to_string(), cert_pem: cert.pem(), key_pem: key.serialize_pem() })
    }
}

/// The name of the CAs `ha-guard certs` and the development certificates make. (Managed mode
/// names each of its CAs by when it was made, since two of them share a caBundle for a while.)
pub const CA_NAME: &str = "ha-guard CA";

/// PEM of one DER object (64 columns, `\n` line ends, as rcgen writes it).
pub fn pem_of(label: &str, der: &[u8]) -> String {
    let config = pem::EncodeConfig::new().set_line_ending(pem::LineEnding::LF);
    pem::encode_config(&pem::Pem::new(label, der), config)
}

/// A CA (10 years) and a serving certificate (1 year) for `dns` names and `ips`.
pub fn generate(dns: &[String], ips: &[IpAddr]) -> Result<Bundle, CertError> {
    generate_with_client(dns, ips, None)
}

/// [`generate`], and with `client` a client certificate (1 year) of that common name signed by
/// the same CA.
pub fn generate_with_client(dns: &[String], ips: &[IpAddr], client: Option<&str>) -> Result<Bundle, CertError> {
    let now = OffsetDateTime::now_utc();
    let ca = Ca::generate(CA_NAME, now - Duration::hours(1), now + Duration::days(CA_DAYS))?;
    issue_bundle(&ca, dns, ips, client, Duration::days(LEAF_DAYS))
}

/// A serving certificate (and a client certificate with `client`) from `ca`, valid for a year
/// (or until the CA expires).
fn issue_bundle(
    ca: &Ca,
    dns: &[String],
    ips: &[IpAddr],
    client: Option<&str>,
    validity: Duration,
) -> Result<Bundle, CertError> {
    let now = OffsetDateTime::now_utc();
    let (not_before, not_after) = (now - Duration::hours(1), now + validity);
    let (cert_pem, key_pem) = ca.issue_serving(dns, ips, not_before, not_after)?;
    let client = client.map(|name| ca.issue_client(name, not_before, not_after)).transpose()?;
    Ok(Bundle { ca_pem: ca.cert_pem.clone(), ca_key_pem: ca.key_pem.clone(), cert_pem, key_pem, client })
}

pub fn parse_ips(ips: &[String]) -> Result<Vec<IpAddr>, CertError> {
    ips.iter().map(|s| s.parse().map_err(|_| CertError::BadIp(s.clone()))).collect()
}

/// Writes `ca.crt`, `ca.key`, `tls.crt`, `tls.key` into `dir` (the keys readable by their owner
/// only), and `client.crt`, `client.key` when the bundle has a client certificate. Returns the
/// paths written.
pub fn write(dir: &Path, bundle: &Bundle) -> Result<Vec<PathBuf>, CertError> {
    write_files(dir, bundle, true)
}

fn write_files(dir: &Path, bundle: &Bundle, with_ca: bool) -> Result<Vec<PathBuf>, CertError> {
    let io = |path: PathBuf| move |source| CertError::Io { path: path.clone(), source };
    std::fs::create_dir_all(dir).map_err(io(dir.to_path_buf()))?;
    let mut files = Vec::new();
    if with_ca {
        files.push((CA_FILE, &bundle.ca_pem, false));
        files.push((CA_KEY_FILE, &bundle.ca_key_pem, true));
    }
    files.push((CERT_FILE, &bundle.cert_pem, false));
    files.push((KEY_FILE, &bundle.key_pem, true));
    if let Some(c) = &bundle.client {
        files.push((CLIENT_CERT_FILE, &c.cert_pem, false));
        files.push((CLIENT_KEY_FILE, &c.key_pem, true));
    }
    let mut written = Vec::new();
    for (name, pem, secret) in files {
        let path = dir.join(name);
        write_private(&path, pem.as_bytes(), secret).map_err(io(path.clone()))?;
        written.push(path);
    }
    Ok(written)
}

/// Writes `bytes` to `path`; a `secret` file is created readable by its owner only (never
/// world-readable for a moment) and made so if it existed.
fn write_private(path: &Path, bytes: &[u8], secret: bool) -> std::io::Result<()> {
    use std::io::Write;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    if secret {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut file = options.open(path)?;
    #[cfg(unix)]
    if secret {
        use std::os::unix::fs::PermissionsExt;
        file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    }
    #[cfg(not(unix))]
    let _ = secret;
    file.write_all(bytes)
}

/// What [`issue_into`] did.
#[derive(Debug)]
pub struct Issued {
    /// The files written, in order.
    pub files: Vec<PathBuf>,
    /// The serving certificate comes from the CA already in the directory (`ca.crt` and `ca.key`
    /// left as they were), so a `caBundle` holding that `ca.crt` trusts it.
    pub kept_ca: bool,
    /// When the serving certificate expires (its validity, or the CA's end if that comes first).
    pub cert_not_after: OffsetDateTime,
    /// When the CA expires.
    pub ca_not_after: OffsetDateTime,
}

/// `ha-guard certs --out DIR`: a serving certificate for `dns` and `ips` (and a client
/// certificate with `client`) from the CA in `DIR/ca.crt` + `DIR/ca.key` when both are there,
/// else (or with `new_ca`) from a new CA written there.
pub fn issue_into(
    dir: &Path,
    dns: &[String],
    ips: &[IpAddr],
    client: Option<&str>,
    new_ca: bool,
    validity: Validity,
) -> Result<Issued, CertError> {
    let (ca_path, key_path) = (dir.join(CA_FILE), dir.join(CA_KEY_FILE));
    let existing = if new_ca { None } else { existing_ca(&ca_path, &key_path)? };
    let kept_ca = existing.is_some();
    let ca = match existing {
        Some(ca) => ca,
        None => {
            let now = OffsetDateTime::now_utc();
            Ca::generate(CA_NAME, now - Duration::hours(1), now + validity.ca)?
        }
    };
    let ca_not_after = ca.not_after;
    let bundle = issue_bundle(&ca, dns, ips, client, validity.cert)?;
    let cert_not_after = (OffsetDateTime::now_utc() + validity.cert).min(ca_not_after);
    Ok(Issued { files: write_files(dir, &bundle, !kept_ca)?, kept_ca, cert_not_after, ca_not_after })
}

/// The CA kept in `ca_path` + `key_path`: `None` when neither exists, an error naming the fix
/// when only one does or they cannot sign.
fn existing_ca(ca_path: &Path, key_path: &Path) -> Result<Option<Ca>, CertError> {
    let read = |p: &Path| match std::fs::read_to_string(p) {
        Ok(s) => Ok(Some(s)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(CertError::Io { path: p.to_path_buf(), source }),
    };
    let (ca, key) = (ca_path.display(), key_path.display());
    match (read(ca_path)?, read(key_path)?) {
        (None, None) => Ok(None),
        (Some(_), None) => Err(CertError::Ca(format!(
            "{ca} exists but {key} does not (earlier versions of `ha-guard certs` did not keep the CA key), so no \
             certificate can be issued from that CA: put its key at {key}, or pass --new-ca to make a new CA (and \
             then put the new {ca} into the webhook configurations' caBundle)"
        ))),
        (None, Some(_)) => Err(CertError::Ca(format!(
            "{key} exists but {ca} does not: put the CA certificate back at {ca}, or pass --new-ca to make a new CA"
        ))),
        (Some(cert_pem), Some(key_pem)) => {
            let found = Ca::from_pem(&cert_pem, &key_pem).map_err(|e| {
                CertError::Ca(format!(
                    "{ca} / {key}: cannot issue from this CA: {e}; pass --new-ca to make a new CA (and then put the \
                     new {ca} into the webhook configurations' caBundle)"
                ))
            })?;
            if found.not_after <= OffsetDateTime::now_utc() {
                return Err(CertError::Ca(format!(
                    "{ca}: the CA expired at {}; pass --new-ca to make a new CA (and then put the new {ca} into the \
                     webhook configurations' caBundle)",
                    found.not_after
                )));
            }
            Ok(Some(found))
        }
    }
}
