//! `serve --tls-mode managed`: ha-guard keeps its own CA and serving certificate, as Kyverno's and
//! Gatekeeper's certificate controllers do, so that no cert-manager is needed.
//!
//! - One Secret in ha-guard's namespace (`--tls-secret`, created empty by the chart) holds
//!   `ca.crt` (PEM bundle: the current CA first, then older CAs still valid), `ca.key` (the
//!   current CA's key), `tls.crt` and `tls.key`. It is read through the API (a watch wakes the
//!   controller; every decision reads it afresh), never mounted.
//! - The CA bundle goes into every webhook of the ValidatingWebhookConfiguration and the
//!   MutatingWebhookConfiguration named `--tls-webhook` (a strategic merge patch, get and patch
//!   only, conditional on the configuration's resourceVersion).
//! - Renewal: the serving certificate when a third of its lifetime remains; the CA when a third
//!   of its lifetime remains, with an overlap: the new CA goes into the bundle first, the serving
//!   certificate is re-issued from it only once both configurations carry it, and the old CA stays
//!   in the bundle until it expires. So at every moment the certificate served is trusted.
//! - Replicas agree through the Secret's resourceVersion: each writes with the version it read;
//!   a 409 means another replica wrote first, so it reads again and decides again (the Secret
//!   then usually needs nothing more). Two replicas starting on an empty Secret end with one CA.
//!
//! What to write is decided by a pure function, [`decide`] (the Secret's contents, the bundles
//! of the webhook configurations and the time in, the change out); [`realize`] issues what it
//! asks for; [`run`] reads, writes, hands each new serving pair to the TLS acceptor (new
//! connections get it) and sets readiness.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{MutatingWebhookConfiguration, ValidatingWebhookConfiguration};
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use rustls::ServerConfig;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use time::OffsetDateTime;

use super::certs::{self, Ca};
use super::state::AppState;
use super::tls::{ClientCa, TlsError};

// --- flags ---------------------------------------------------------------------------------------

/// `serve --tls-mode`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum TlsMode {
    /// `--tls-cert` and `--tls-key`, re-read when they change (cert-manager, a mounted Secret,
    /// `ha-guard certs`, or development certificates generated when neither file exists).
    #[default]
    Files,
    /// A CA and a serving certificate kept by ha-guard in a Secret of its namespace.
    Managed,
}

/// The `serve` flags of self-managed certificates (flattened into `serve`'s arguments).
#[derive(clap::Args, Clone, Debug)]
pub struct ManagedTlsArgs {
    /// Where the serving certificate comes from: `files` (--tls-cert and --tls-key, re-read when
    /// they change) or `managed` (ha-guard keeps a CA and a serving certificate in a Secret of its
    /// namespace, puts the CA into its webhook configurations' caBundle and renews both).
    #[arg(long, value_enum, default_value = "files", value_name = "MODE")]
    pub tls_mode: TlsMode,
    /// With --tls-mode managed: the Secret in ha-guard's namespace that holds ca.crt, ca.key,
    /// tls.crt and tls.key (the chart creates it empty; ha-guard fills it).
    #[arg(long, default_value = "ha-guard-tls", value_name = "NAME")]
    pub tls_secret: String,
    /// With --tls-mode managed: the Service in front of ha-guard. The certificate is for NAME,
    /// NAME.NS, NAME.NS.svc and NAME.NS.svc.cluster.local.
    #[arg(long, default_value = "ha-guard", value_name = "NAME")]
    pub tls_service: String,
    /// With --tls-mode managed: the ValidatingWebhookConfiguration and the
    /// MutatingWebhookConfiguration of this name get the CA bundle on every webhook.
    #[arg(long, default_value = "ha-guard", value_name = "NAME")]
    pub tls_webhook: String,
    /// With --tls-mode managed: validity of a new CA (90s, 15m, 2160h, 90d, 5y); it is renewed
    /// when a third of it remains.
    #[arg(long, default_value = "5y", value_name = "DURATION", value_parser = parse_validity)]
    pub tls_ca_validity: Duration,
    /// With --tls-mode managed: validity of a new serving certificate (90s, 15m, 2160h, 90d, 5y);
    /// it is renewed when a third of it remains.
    #[arg(long, default_value = "90d", value_name = "DURATION", value_parser = parse_validity)]
    pub tls_cert_validity: Duration,
}

/// Shortest validity accepted: below it renewal would be most of what the process does.
pub const MIN_VALIDITY: Duration = Duration::from_secs(10);

/// Longest validity accepted: 100 years (humantime's, of 365.25 days). A certificate's notAfter
/// must stay within year 9999 (X.509's GeneralizedTime, and the `time` crate's range: past it the
/// addition panicked), and no CA needs to outlive the cluster by more.
pub const MAX_VALIDITY: Duration = Duration::from_secs(100 * 31_557_600);

/// A `--validity`-like flag: a humantime duration from [`MIN_VALIDITY`] to [`MAX_VALIDITY`].
pub(crate) fn parse_validity(s: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(s)
        .map_err(|e| format!("{e}: expected a duration such as 90s, 15m, 2160h, 90d, 5y"))?;
    if d < MIN_VALIDITY {
        return Err(format!("{s} is shorter than the minimum of {}", humantime::format_duration(MIN_VALIDITY)));
    }
    if d > MAX_VALIDITY {
        return Err(format!(
            "{s} is longer than the maximum of {} (100y: a certificate must end before year 9999)",
            humantime::format_duration(MAX_VALIDITY)
        ));
    }
    Ok(d)
}

/// What the controller needs, resolved from the flags and the environment.
#[derive(Clone, Debug)]
pub struct Settings {
    /// ha-guard's own namespace (of the Secret and the Service).
    pub namespace: String,
    pub secret: String,
    pub service: String,
    pub webhook: String,
    pub ca_validity: Duration,
    pub cert_validity: Duration,
}

impl Settings {
    /// The serving certificate's DNS names: the Service's, as a caller inside the cluster and the
    /// kube-apiserver (`NAME.NS.svc`) spell them.
    pub fn dns_names(&self) -> Vec<String> {
        let (s, ns) = (&self.service, &self.namespace);
        vec![format!("{s}.{ns}.svc"), s.clone(), format!("{s}.{ns}"), format!("{s}.{ns}.svc.cluster.local")]
    }
}

/// `--tls-mode managed`, ready to run: the API client and the settings.
#[derive(Clone)]
pub struct Managed {
    pub client: kube::Client,
    pub settings: Settings,
}

impl std::fmt::Debug for Managed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Managed").field("settings", &self.settings).finish_non_exhaustive()
    }
}

/// Where a pod's service account namespace is mounted.
pub const SERVICE_ACCOUNT_NAMESPACE: &str = "/var/run/secrets/kubernetes.io/serviceaccount/namespace";

/// ha-guard's namespace: `POD_NAMESPACE`, else the service account's namespace file.
pub fn own_namespace() -> Result<String, String> {
    if let Some(ns) = std::env::var("POD_NAMESPACE").ok().map(|s| s.trim().to_string()).filter(|s| !s.is_empty()) {
        return Ok(ns);
    }
    match std::fs::read_to_string(SERVICE_ACCOUNT_NAMESPACE) {
        Ok(ns) if !ns.trim().is_empty() => Ok(ns.trim().to_string()),
        _ => Err(format!(
            "--tls-mode managed: ha-guard's namespace (where its Secret and Service are) is unknown: set the \
             environment variable POD_NAMESPACE (the chart sets it from the downward API, fieldRef \
             metadata.namespace) or run with a service account ({SERVICE_ACCOUNT_NAMESPACE})"
        )),
    }
}

/// Resolves the flags: `None` in files mode. In managed mode the API client is `live` (the one
/// `--cluster` found) or, when the view does not come from the cluster, inferred the same way
/// (in-cluster service account, else KUBECONFIG or ~/.kube/config).
pub async fn setup(args: &ManagedTlsArgs, live: Option<kube::Client>) -> Result<Option<Managed>, String> {
    if args.tls_mode == TlsMode::Files {
        return Ok(None);
    }
    for (flag, name) in
        [("--tls-secret", &args.tls_secret), ("--tls-service", &args.tls_service), ("--tls-webhook", &args.tls_webhook)]
    {
        let ok = !name.is_empty()
            && name.len() <= 253
            && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
            && name.starts_with(|c: char| c.is_ascii_alphanumeric())
            && name.ends_with(|c: char| c.is_ascii_alphanumeric());
        if !ok {
            return Err(format!(
                "{flag} {name:?}: not a Kubernetes object name (lowercase letters, digits, '-' and '.')"
            ));
        }
    }
    if args.tls_service.contains('.') {
        return Err(format!("--tls-service {:?}: a Service name has no '.'", args.tls_service));
    }
    let namespace = own_namespace()?;
    let client = match live {
        Some(c) => c,
        None => {
            let config = kube::Config::infer().await.map_err(|e| {
                format!(
                    "--tls-mode managed keeps the certificates in a Secret, so it needs the Kubernetes API, and there is \
                     none: no in-cluster service account and no kubeconfig ({e}). Run it in the cluster, set KUBECONFIG, \
                     or serve certificate files with --tls-mode files"
                )
            })?;
            kube::Client::try_from(config).map_err(|e| format!("--tls-mode managed: {e}"))?
        }
    };
    Ok(Some(Managed {
        client,
        settings: Settings {
            namespace,
            secret: args.tls_secret.clone(),
            service: args.tls_service.clone(),
            webhook: args.tls_webhook.clone(),
            ca_validity: args.tls_ca_validity,
            cert_validity: args.tls_cert_validity,
        },
    }))
}

// --- the decision (pure) -----------------------------------------------------------------------

/// The Secret's keys.
pub const CA_CRT: &str = certs::CA_FILE;
pub const CA_KEY: &str = certs::CA_KEY_FILE;
pub const TLS_CRT: &str = certs::CERT_FILE;
pub const TLS_KEY: &str = certs::KEY_FILE;

/// A Secret's `data`.
pub type SecretData = BTreeMap<String, Vec<u8>>;

/// A webhook configuration as read: each webhook's name and caBundle (empty when unset).
#[derive(Clone, Debug, PartialEq)]
pub struct ConfigBundles {
    /// `ValidatingWebhookConfiguration` or `MutatingWebhookConfiguration`.
    pub kind: &'static str,
    pub name: String,
    /// `None`: not found or not readable (the controller says why).
    pub webhooks: Option<Vec<(String, Vec<u8>)>>,
}

/// What the certificates must be.
#[derive(Clone, Debug)]
pub struct Policy {
    /// The serving certificate's DNS names (the first is its common name).
    pub dns_names: Vec<String>,
    /// Validity of a new CA and of a new serving certificate, in seconds.
    pub ca_validity: i64,
    pub cert_validity: i64,
    /// Seconds a new CA sits in the webhook configurations before a serving certificate comes
    /// from it: the apiserver sees a configuration change through its informer, a moment after
    /// the change is read back.
    pub propagation: i64,
}

impl Policy {
    /// The policy of `settings`; the propagation delay is a tenth of a certificate's validity,
    /// at most 30 s (short validities exist for tests).
    pub fn of(settings: &Settings) -> Policy {
        let cert_validity = settings.cert_validity.as_secs() as i64;
        Policy {
            dns_names: settings.dns_names(),
            ca_validity: settings.ca_validity.as_secs() as i64,
            cert_validity,
            propagation: (cert_validity / 10).min(30),
        }
    }
}

/// A certificate as read from PEM, with what the decision looks at.
#[derive(Clone, Debug, PartialEq)]
pub struct Cert {
    pub der: Vec<u8>,
    /// Seconds since the epoch.
    pub not_before: i64,
    pub not_after: i64,
    pub is_ca: bool,
    pub subject: String,
    /// Hex, colon-separated.
    pub serial: String,
    pub dns_names: Vec<String>,
    /// The subject public key's bits (compared with a private key's public half).
    pub public_key: Vec<u8>,
}

impl Cert {
    pub fn parse(der: &[u8]) -> Result<Cert, String> {
        let (_, c) = x509_parser::parse_x509_certificate(der).map_err(|e| format!("not an X.509 certificate: {e}"))?;
        let dns_names = match c.subject_alternative_name() {
            Ok(Some(san)) => san
                .value
                .general_names
                .iter()
                .filter_map(|n| match n {
                    x509_parser::extensions::GeneralName::DNSName(d) => Some(d.to_string()),
                    _ => None,
                })
                .collect(),
            _ => Vec::new(),
        };
        Ok(Cert {
            der: der.to_vec(),
            not_before: c.validity().not_before.timestamp(),
            not_after: c.validity().not_after.timestamp(),
            is_ca: c.is_ca(),
            subject: c.subject().to_string(),
            serial: c.raw_serial_as_string(),
            dns_names,
            public_key: c.public_key().subject_public_key.data.to_vec(),
        })
    }

    /// When it is renewed: a third of its lifetime before its notAfter.
    pub fn renew_at(&self) -> i64 {
        self.not_after - (self.not_after - self.not_before).max(0) / 3
    }

    /// When it was made, as far as its validity tells: [`realize`] sets notBefore back by
    /// [`backdate`] of the validity, so a lifetime L = V + min(V/10, 1 h) was made L - V after
    /// its notBefore.
    pub fn made_at(&self) -> i64 {
        let lifetime = (self.not_after - self.not_before).max(0);
        self.not_before + (lifetime / 11).min(3600)
    }

    /// `ca` issued it: the issuer name is `ca`'s subject and `ca`'s key verifies the signature.
    pub fn signed_by(&self, ca: &Cert) -> bool {
        let (Ok((_, leaf)), Ok((_, ca))) =
            (x509_parser::parse_x509_certificate(&self.der), x509_parser::parse_x509_certificate(&ca.der))
        else {
            return false;
        };
        leaf.issuer().as_raw() == ca.subject().as_raw() && leaf.verify_signature(Some(ca.public_key())).is_ok()
    }

    /// For logs: subject, serial and notAfter.
    pub fn describe(&self) -> String {
        format!("{} (serial {}, notAfter {})", self.subject, self.serial, rfc3339(self.not_after))
    }
}

/// Seconds since the epoch as RFC 3339 (for messages).
pub fn rfc3339(t: i64) -> String {
    let at = if t >= 0 { UNIX_EPOCH + Duration::from_secs(t as u64) } else { UNIX_EPOCH };
    humantime::format_rfc3339_seconds(at).to_string()
}

/// The certificates of a PEM value, one entry per PEM block; an entry that does not parse says
/// why. A value with no PEM block at all is one error.
fn parse_pem_certs(bytes: &[u8]) -> Vec<Result<Cert, String>> {
    let mut out = Vec::new();
    for der in CertificateDer::pem_slice_iter(bytes) {
        match der {
            Ok(der) => out.push(Cert::parse(der.as_ref())),
            Err(e) => {
                out.push(Err(format!("not PEM: {e}")));
                break;
            }
        }
    }
    if out.is_empty() {
        out.push(Err("no PEM certificate in it".to_string()));
    }
    out
}

/// The public half of a PEM private key (what a certificate's subject public key must equal).
fn key_public(bytes: &[u8]) -> Result<Vec<u8>, String> {
    let text = std::str::from_utf8(bytes).map_err(|_| "not a PEM private key (not text)".to_string())?;
    let key = rcgen::KeyPair::from_pem(text).map_err(|e| format!("not a usable PEM private key ({e})"))?;
    Ok(key.public_key_raw().to_vec())
}

/// A usable serving pair from the Secret.
#[derive(Clone, Debug, PartialEq)]
pub struct Serving {
    /// `tls.crt` as DER, the leaf first.
    pub chain: Vec<Vec<u8>>,
    /// `tls.key` as read (PEM).
    pub key_pem: Vec<u8>,
    pub leaf: Cert,
    /// The CA that signed it, when one of ca.crt or of the caBundles did.
    pub issuer: Option<Cert>,
}

/// What to change in the Secret.
#[derive(Clone, Debug, PartialEq)]
pub struct SecretChange {
    /// A new CA (first in ca.crt, its key in ca.key), and why.
    pub new_ca: Option<String>,
    /// The CAs that stay in ca.crt after the current (or new) one, in order.
    pub keep: Vec<Cert>,
    /// What leaves ca.crt, and why.
    pub dropped: Vec<String>,
    /// A new serving certificate from the current (or new) CA, and why.
    pub issue: Option<String>,
}

/// The outcome of [`decide`].
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    /// Write the Secret first (then decide again on what was written).
    pub write: Option<SecretChange>,
    /// With the Secret as it is: the webhook configurations (indexes into the `configs` given)
    /// whose webhooks do not all carry `ca.crt` as their caBundle.
    pub inject: Vec<usize>,
    /// `ca.crt` as it is in the Secret: the caBundle to inject.
    pub bundle: Vec<u8>,
    /// The Secret's serving pair, when usable (valid, its key matching): serve it.
    pub serve: Option<Serving>,
    /// The CA that signed `serve` is in every webhook's caBundle of every configuration.
    pub trusted: bool,
    /// What is wrong in the Secret (unreadable values, keys that do not match), each naming the key.
    pub problems: Vec<String>,
    /// A re-issue held back until the webhook configurations carry the new CA.
    pub waiting: Option<String>,
    /// Decide again by then at the latest (seconds since the epoch), even if nothing changes.
    pub recheck_at: i64,
}

/// Whether `ca` is in the caBundle of every webhook of every configuration (all found).
fn in_every_bundle(ca: &Cert, configs: &[ConfigBundles]) -> bool {
    configs.iter().all(|c| {
        c.webhooks.as_ref().is_some_and(|hooks| {
            hooks
                .iter()
                .all(|(_, bundle)| parse_pem_certs(bundle).iter().any(|b| b.as_ref().is_ok_and(|b| b.der == ca.der)))
        })
    })
}

/// Whether every webhook's caBundle, in every configuration (all found), holds a CA that signed
/// `leaf`.
fn trusted_by_every_bundle(leaf: &Cert, configs: &[ConfigBundles]) -> bool {
    configs.iter().all(|c| {
        c.webhooks.as_ref().is_some_and(|hooks| {
            hooks.iter().all(|(_, bundle)| {
                parse_pem_certs(bundle).iter().any(|b| b.as_ref().is_ok_and(|ca| ca.is_ca && leaf.signed_by(ca)))
            })
        })
    })
}

/// Decides what to write, given the Secret's `data`, the webhook configurations' bundles and the
/// time `now` (seconds since the epoch). Pure: no I/O, no randomness (see [`realize`]).
///
/// - The current CA is ca.crt's first certificate, with ca.key its key. When it is missing or
///   unusable (unreadable, not a CA, expired, no or another key), or a third of its lifetime
///   remains, a new CA is made; the old one stays in ca.crt while it is a valid CA, so the
///   serving certificate it signed stays trusted.
/// - Older CAs in ca.crt stay until they expire; unreadable entries, non-CAs and duplicates go.
/// - The serving certificate is (re-)issued from the current CA when it is missing or unusable,
///   when a third of its lifetime remains, when it lacks a name, or when an older CA signed it;
///   but while the one served is trusted by the bundles and the current CA is not yet in every
///   bundle (a new CA), the re-issue waits for the injection.
/// - Only once the Secret needs nothing does the bundle go into the configurations.
pub fn decide(secret: &SecretData, configs: &[ConfigBundles], policy: &Policy, now: i64) -> Decision {
    let value = |k: &str| secret.get(k).map(Vec::as_slice).filter(|v| !v.is_empty());
    let mut problems = Vec::new();

    // The CAs of ca.crt, in order, and the current one.
    let entries = value(CA_CRT).map(parse_pem_certs).unwrap_or_default();
    for (i, e) in entries.iter().enumerate() {
        if let Err(e) = e {
            problems.push(format!("{CA_CRT}: certificate {}: {e}", i + 1));
        }
    }
    let ca_key = value(CA_KEY).map(key_public);
    if let Some(Err(e)) = &ca_key {
        problems.push(format!("{CA_KEY}: {e}"));
    }
    let current: Result<&Cert, String> = match entries.first() {
        None => Err("the Secret holds no CA yet".to_string()),
        Some(Err(_)) => Err(format!("the first certificate of {CA_CRT} is unreadable")),
        Some(Ok(c)) if !c.is_ca => Err(format!("the first certificate of {CA_CRT}, {}, is not a CA", c.subject)),
        Some(Ok(c)) if now >= c.not_after => Err(format!("the CA {} expired at {}", c.subject, rfc3339(c.not_after))),
        Some(Ok(_)) => match &ca_key {
            None => Err(format!("{CA_KEY} is missing")),
            Some(Err(_)) => Err(format!("{CA_KEY} is unreadable")),
            Some(Ok(public)) => match entries.first() {
                Some(Ok(c)) if &c.public_key == public => Ok(c),
                _ => {
                    problems.push(format!("{CA_KEY} does not belong to the first certificate of {CA_CRT}"));
                    Err(format!("{CA_KEY} does not belong to the first certificate of {CA_CRT}"))
                }
            },
        },
    };
    let new_ca = match &current {
        Err(why) => Some(why.clone()),
        Ok(c) if now >= c.renew_at() => {
            Some(format!("the CA {} expires at {}: a third of its lifetime remains", c.subject, rfc3339(c.not_after)))
        }
        Ok(_) => None,
    };

    // The CAs that stay after the current (or new) one.
    let (mut keep, mut dropped): (Vec<Cert>, Vec<String>) = (Vec::new(), Vec::new());
    let skip = usize::from(new_ca.is_none());
    for (i, e) in entries.iter().enumerate().skip(skip) {
        match e {
            Err(e) => dropped.push(format!("certificate {} of {CA_CRT}: unreadable ({e})", i + 1)),
            Ok(c) if !c.is_ca => dropped.push(format!("{}: not a CA", c.describe())),
            Ok(c) if now >= c.not_after => dropped.push(format!("{}: expired", c.describe())),
            Ok(c)
                if keep.iter().any(|k| k.der == c.der)
                    || (skip == 1 && current.as_ref().is_ok_and(|cur| cur.der == c.der)) =>
            {
                dropped.push(format!("{}: a duplicate", c.describe()))
            }
            Ok(c) => keep.push(c.clone()),
        }
    }

    // The serving pair.
    let serving = read_serving(secret, now, &mut problems);
    let ca_of = |leaf: &Cert| -> Option<Cert> {
        let in_secret = current.as_ref().ok().map(|c| (*c).clone()).into_iter().chain(keep.iter().cloned());
        let in_bundles = configs
            .iter()
            .flat_map(|c| c.webhooks.iter().flatten())
            .flat_map(|(_, b)| parse_pem_certs(b).into_iter().flatten());
        in_secret.chain(in_bundles).find(|ca| ca.is_ca && leaf.signed_by(ca))
    };
    let serve = serving.as_ref().ok().map(|s| Serving { issuer: ca_of(&s.leaf), ..s.clone() });
    let trusted = serve.as_ref().is_some_and(|s| trusted_by_every_bundle(&s.leaf, configs));

    let reissue = match &serving {
        Err(why) => Some(why.clone()),
        Ok(s) => {
            let missing: Vec<&String> = policy.dns_names.iter().filter(|n| !s.leaf.dns_names.contains(n)).collect();
            if now >= s.leaf.renew_at() {
                Some(format!(
                    "the serving certificate expires at {}: a third of its lifetime remains",
                    rfc3339(s.leaf.not_after)
                ))
            } else if !missing.is_empty() {
                Some(format!(
                    "the serving certificate is not for {}",
                    missing.iter().map(|n| n.as_str()).collect::<Vec<_>>().join(", ")
                ))
            } else if new_ca.is_some() {
                Some("the CA that signed the serving certificate is being replaced".to_string())
            } else if !current.as_ref().is_ok_and(|c| s.leaf.signed_by(c)) {
                Some("the serving certificate was not issued by the current CA".to_string())
            } else {
                None
            }
        }
    };
    // The current CA is in every bundle, and has been for long enough that the apiserver sees it.
    let current_everywhere = new_ca.is_none()
        && current.as_ref().is_ok_and(|c| in_every_bundle(c, configs) && now >= c.made_at() + policy.propagation);
    let (issue, waiting) = match reissue {
        // Nothing trusted to keep serving meanwhile, or the new CA is trusted already: issue now.
        Some(why) if current_everywhere || !trusted => (Some(why), None),
        Some(why) => (
            None,
            Some(format!(
                "the serving certificate is re-issued once every webhook configuration has carried the new CA for \
                 {}s ({why})",
                policy.propagation
            )),
        ),
        None => (None, None),
    };

    let write = (new_ca.is_some() || !dropped.is_empty() || issue.is_some()).then(|| SecretChange {
        new_ca: new_ca.clone(),
        keep: keep.clone(),
        dropped,
        issue,
    });
    let bundle = value(CA_CRT).unwrap_or_default().to_vec();
    let inject = if write.is_some() {
        Vec::new()
    } else {
        configs
            .iter()
            .enumerate()
            .filter(|(_, c)| c.webhooks.as_ref().is_some_and(|hooks| hooks.iter().any(|(_, b)| *b != bundle)))
            .map(|(i, _)| i)
            .collect()
    };

    // Wake up for the next renewal or expiry, whatever comes first.
    let mut times: Vec<i64> = keep.iter().map(|c| c.not_after).collect();
    if let (Ok(c), None) = (&current, &new_ca) {
        times.push(c.renew_at());
        if waiting.is_some() {
            times.push(c.made_at() + policy.propagation);
        }
    }
    if let Ok(s) = &serving {
        times.extend([s.leaf.renew_at(), s.leaf.not_after]);
    }
    let recheck_at = times.into_iter().filter(|t| *t > now).min().unwrap_or(now + 3600);

    Decision { write, inject, bundle, serve, trusted, problems, waiting, recheck_at }
}

/// The Secret's serving pair, or why there is none usable (pushing what is unreadable or
/// mismatched to `problems`).
fn read_serving(secret: &SecretData, now: i64, problems: &mut Vec<String>) -> Result<Serving, String> {
    let value = |k: &str| secret.get(k).map(Vec::as_slice).filter(|v| !v.is_empty());
    let (crt, key) = match (value(TLS_CRT), value(TLS_KEY)) {
        (None, None) => return Err("the Secret holds no serving certificate yet".to_string()),
        (Some(_), None) => return Err(format!("{TLS_KEY} is missing")),
        (None, Some(_)) => return Err(format!("{TLS_CRT} is missing")),
        (Some(c), Some(k)) => (c, k),
    };
    let mut unusable = |why: String| {
        problems.push(why.clone());
        Err(why)
    };
    let entries = parse_pem_certs(crt);
    let leaf = match entries.first() {
        Some(Ok(c)) => c.clone(),
        Some(Err(e)) => return unusable(format!("{TLS_CRT}: {e}")),
        None => return unusable(format!("{TLS_CRT}: no PEM certificate in it")),
    };
    let public = match key_public(key) {
        Ok(p) => p,
        Err(e) => return unusable(format!("{TLS_KEY}: {e}")),
    };
    if public != leaf.public_key {
        return unusable(format!("{TLS_KEY} does not belong to {TLS_CRT}"));
    }
    if now >= leaf.not_after {
        return Err(format!("the serving certificate expired at {}", rfc3339(leaf.not_after)));
    }
    let chain = entries.into_iter().flatten().map(|c| c.der).collect();
    Ok(Serving { chain, key_pem: key.to_vec(), leaf, issuer: None })
}

/// How far a new certificate's notBefore is set back, for clocks a little behind ours: a tenth
/// of its validity, at most an hour.
fn backdate(validity: i64) -> i64 {
    (validity / 10).min(3600)
}

fn at(t: i64) -> Result<OffsetDateTime, String> {
    OffsetDateTime::from_unix_timestamp(t).map_err(|e| format!("time {t}: {e}"))
}

/// The Secret's `data` after `change`, issued at `now`: other keys are kept as they are, and so
/// are ca.crt and ca.key when the CAs do not change.
pub fn realize(secret: &SecretData, change: &SecretChange, policy: &Policy, now: i64) -> Result<SecretData, String> {
    let mut data = secret.clone();
    let text = |k: &str| String::from_utf8_lossy(secret.get(k).map(Vec::as_slice).unwrap_or_default()).into_owned();
    let ca = match change.new_ca {
        Some(_) => {
            let name = format!("ha-guard CA {}", rfc3339(now));
            Ca::generate(&name, at(now - backdate(policy.ca_validity))?, at(now + policy.ca_validity)?)
                .map_err(|e| e.to_string())?
        }
        None => Ca::from_pem(&text(CA_CRT), &text(CA_KEY)).map_err(|e| format!("{CA_CRT} / {CA_KEY}: {e}"))?,
    };
    if change.new_ca.is_some() || !change.dropped.is_empty() {
        let mut bundle = ca.cert_pem.clone();
        for c in &change.keep {
            bundle.push_str(&certs::pem_of("CERTIFICATE", &c.der));
        }
        data.insert(CA_CRT.to_string(), bundle.into_bytes());
        data.insert(CA_KEY.to_string(), ca.key_pem.clone().into_bytes());
    }
    if change.issue.is_some() {
        let (cert, key) = ca
            .issue_serving(
                &policy.dns_names,
                &[],
                at(now - backdate(policy.cert_validity))?,
                at(now + policy.cert_validity)?,
            )
            .map_err(|e| e.to_string())?;
        data.insert(TLS_CRT.to_string(), cert.into_bytes());
        data.insert(TLS_KEY.to_string(), key.into_bytes());
    }
    Ok(data)
}

// --- serving -----------------------------------------------------------------------------------

/// The serving certificate of managed mode, swapped in as the controller loads new ones: every
/// new TLS connection gets the current one (connections in flight keep theirs).
#[derive(Default)]
pub struct ServedCert {
    current: RwLock<Option<Arc<Loaded>>>,
}

struct Loaded {
    key: Arc<CertifiedKey>,
    leaf: Cert,
    /// `tls.crt` and `tls.key` as loaded, to tell a new pair.
    source: (Vec<Vec<u8>>, Vec<u8>),
    /// The server names (SNI) it was asked for so far, [`MAX_NAMES_LOGGED`] at most.
    names: std::sync::Mutex<Vec<String>>,
}

/// Server names logged per certificate: callers choose them, so they are not kept unbounded.
const MAX_NAMES_LOGGED: usize = 8;

impl std::fmt::Debug for ServedCert {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServedCert").field("serial", &self.serial()).finish()
    }
}

impl ServedCert {
    pub fn new() -> Arc<ServedCert> {
        Arc::new(ServedCert::default())
    }

    fn get(&self) -> Option<Arc<Loaded>> {
        self.current.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The serial of the certificate served, if any.
    pub fn serial(&self) -> Option<String> {
        self.get().map(|l| l.leaf.serial.clone())
    }

    /// Serves `s` from now on. `Ok(false)`: it is served already.
    pub fn load(&self, s: &Serving) -> Result<bool, String> {
        if self.get().is_some_and(|l| l.source.0 == s.chain && l.source.1 == s.key_pem) {
            return Ok(false);
        }
        let key = PrivateKeyDer::from_pem_slice(&s.key_pem).map_err(|e| format!("{TLS_KEY}: {e}"))?;
        let signer = rustls::crypto::ring::sign::any_supported_type(&key).map_err(|e| format!("{TLS_KEY}: {e}"))?;
        let chain = s.chain.iter().map(|d| CertificateDer::from(d.clone())).collect();
        let certified = CertifiedKey::new(chain, signer);
        certified.keys_match().map_err(|e| format!("{TLS_KEY} / {TLS_CRT}: {e}"))?;
        let loaded = Loaded {
            key: Arc::new(certified),
            leaf: s.leaf.clone(),
            source: (s.chain.clone(), s.key_pem.clone()),
            names: Default::default(),
        };
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = Some(Arc::new(loaded));
        Ok(true)
    }
}

impl ResolvesServerCert for ServedCert {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let loaded = self.get()?;
        // Once per certificate and name asked for: shows when callers (the apiserver asks for
        // NAME.NS.svc) reach a renewed certificate, which they do on their next new connection.
        let name = hello.server_name().unwrap_or_default();
        let mut names = loaded.names.lock().unwrap_or_else(|p| p.into_inner());
        if names.len() < MAX_NAMES_LOGGED && !names.iter().any(|n| n == name) {
            names.push(name.to_string());
            tracing::info!(
                serial = %loaded.leaf.serial,
                not_after = %rfc3339(loaded.leaf.not_after),
                server_name = name,
                "first TLS handshake with this serving certificate"
            );
        }
        Some(loaded.key.clone())
    }
}

/// The rustls configuration of managed mode: the certificate from `served`, TLS 1.3 and 1.2,
/// HTTP/2 and HTTP/1.1, and with `client_ca` client certificates required (as
/// [`super::tls::server_config_with`] does for files).
pub fn server_config(served: Arc<ServedCert>, client_ca: Option<&ClientCa>) -> Result<Arc<ServerConfig>, TlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let bad =
        |detail: String| TlsError::ClientCa { path: client_ca.map(|c| c.path.clone()).unwrap_or_default(), detail };
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| bad(e.to_string()))?;
    let builder = match client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(ca.roots.clone(), provider)
                .build()
                .map_err(|e| bad(e.to_string()))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder.with_cert_resolver(served);
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// Polls the client CA file (`serve --client-ca`) in managed mode and swaps in a new TLS
/// configuration when it changes. A change is acted on once, however long the file then stays as
/// it is: loaded (`reloads{result="success"}`, `ha_guard_tls_reloads_total`), or refused with the
/// CA in force kept (`{result="failure"}`) and one warning.
pub async fn reload_client_ca(
    path: std::path::PathBuf,
    interval: Duration,
    served: Arc<ServedCert>,
    config: axum_server::tls_rustls::RustlsConfig,
    mut digest: [u8; 32],
    reloads: prometheus_client::metrics::family::Family<
        super::metrics::ResultLabels,
        prometheus_client::metrics::counter::Counter,
    >,
) {
    use sha2::Digest;
    let counted = |result: &'static str| reloads.get_or_create(&super::metrics::ResultLabels { result }).inc();
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The file's bytes (or its read error) at the last look; None: compare with what serving
    // started with.
    let mut seen: Option<[u8; 32]> = None;
    loop {
        tick.tick().await;
        let now: [u8; 32] = match std::fs::read(&path) {
            Ok(bytes) => sha2::Sha256::digest(&bytes).into(),
            Err(e) => sha2::Sha256::digest(format!("\0{:?}", e.kind())).into(),
        };
        if seen == Some(now) {
            continue;
        }
        seen = Some(now);
        let ca = match super::tls::read_client_ca(&path) {
            Ok(ca) => ca,
            Err(e) => {
                counted("failure");
                tracing::warn!(error = %e, "client CA unreadable; keeping the current TLS configuration");
                continue;
            }
        };
        if ca.digest == digest {
            continue;
        }
        match server_config(served.clone(), Some(&ca)) {
            Ok(c) => {
                config.reload_from_config(c);
                digest = ca.digest;
                counted("success");
                tracing::info!(client_ca = %path.display(), "reloaded the client CA");
            }
            Err(e) => {
                counted("failure");
                tracing::warn!(error = %e, "new client CA rejected; keeping the current one")
            }
        }
    }
}

// --- the controller ----------------------------------------------------------------------------

/// Seconds since the epoch, now.
fn unix_now() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0)
}

/// Logs a condition once when it starts, once when it changes, and once when it ends (not on
/// every retry).
#[derive(Default)]
struct StateLog(BTreeMap<&'static str, String>);

impl StateLog {
    fn set(&mut self, topic: &'static str, message: String, warn: bool) {
        if self.0.get(topic) == Some(&message) {
            return;
        }
        if warn {
            tracing::warn!(topic, error = %message, "managed TLS");
        } else {
            tracing::info!(topic, state = %message, "managed TLS");
        }
        self.0.insert(topic, message);
    }

    fn clear(&mut self, topic: &'static str, resolved: &str) {
        if self.0.remove(topic).is_some() {
            tracing::info!(topic, "managed TLS: {resolved}");
        }
    }
}

/// Capped exponential backoff between failed attempts.
struct Backoff {
    next: Duration,
}

impl Backoff {
    const FIRST: Duration = Duration::from_millis(200);
    const MAX: Duration = Duration::from_secs(30);

    fn new() -> Backoff {
        Backoff { next: Self::FIRST }
    }

    fn fail(&mut self) -> Duration {
        let d = self.next;
        self.next = (self.next * 2).min(Self::MAX);
        d
    }

    fn reset(&mut self) {
        self.next = Self::FIRST;
    }
}

/// Aborts a task when dropped (the Secret watch stops with the controller).
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The object a request was about, for error messages that say what to fix.
#[derive(Clone, Copy)]
enum Target<'a> {
    Secret { namespace: &'a str, name: &'a str },
    Webhooks { kind: &'static str, name: &'a str },
}

/// An API error as a sentence that names the object and the fix.
fn explain(e: &kube::Error, verb: &str, target: Target<'_>) -> String {
    let what = match target {
        Target::Secret { namespace, name } => format!("Secret {namespace}/{name}"),
        Target::Webhooks { kind, name } => format!("{kind} {name}"),
    };
    let kube::Error::Api(status) = e else {
        return format!("{verb} {what}: {e}");
    };
    match (status.code, target) {
        (403, Target::Secret { namespace, name }) => format!(
            "{verb} {what}: forbidden: ha-guard's service account needs the verbs get, watch, update on secrets with \
             resourceNames [{name}] in a Role of namespace {namespace} (the chart's RBAC grants them); the apiserver \
             said: {}",
            status.message
        ),
        (403, Target::Webhooks { kind, name }) => format!(
            "{verb} {what}: forbidden: ha-guard's service account needs the verbs get, patch on {}s (apiGroup \
             admissionregistration.k8s.io) with resourceNames [{name}] in a ClusterRole (the chart's RBAC grants \
             them); the apiserver said: {}",
            kind.to_lowercase(),
            status.message
        ),
        (404, Target::Secret { namespace, name }) => format!(
            "{what} not found: the chart creates it (empty); without the chart create it with `kubectl create secret \
             generic {name} -n {namespace}`, or name another with --tls-secret"
        ),
        (404, Target::Webhooks { .. }) => format!(
            "{what} not found: the chart creates it; --tls-webhook names the ValidatingWebhookConfiguration and the \
             MutatingWebhookConfiguration whose webhooks get the CA bundle"
        ),
        (401, _) => format!(
            "{verb} {what}: unauthorized: the apiserver does not accept ha-guard's credentials (service account token \
             or kubeconfig): {}",
            status.message
        ),
        (code, _) => format!("{verb} {what}: {} ({code})", status.message),
    }
}

/// What a round leaves to do.
enum Next {
    /// Something was written (or lost a race): read and decide again now.
    Again,
    /// Settled until then (seconds since the epoch), or until the Secret changes.
    Until(i64),
}

struct Controller {
    settings: Settings,
    policy: Policy,
    secrets: Api<Secret>,
    validating: Api<ValidatingWebhookConfiguration>,
    mutating: Api<MutatingWebhookConfiguration>,
    served: Arc<ServedCert>,
    state: Arc<AppState>,
    log: StateLog,
}

/// Runs the controller of `managed` until aborted: keeps the Secret and the webhook
/// configurations' caBundle right, loads each new serving pair into `served`, sets the
/// certificate metrics, and marks the server ready once a certificate is served whose CA every
/// webhook configuration carries. Also wakes up every `poll` (the caBundle may have been
/// overwritten, e.g. by a re-applied manifest; the configurations are read, never watched).
pub async fn run(managed: Managed, served: Arc<ServedCert>, state: Arc<AppState>, poll: Duration) {
    let Managed { client, settings } = managed;
    let policy = Policy::of(&settings);
    tracing::info!(
        secret = %format!("{}/{}", settings.namespace, settings.secret),
        webhook_configurations = %settings.webhook,
        dns_names = %policy.dns_names.join(","),
        ca_validity = %humantime::format_duration(settings.ca_validity),
        cert_validity = %humantime::format_duration(settings.cert_validity),
        "managed TLS: keeping the CA and serving certificate in a Secret"
    );
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &settings.namespace);
    let wake = Arc::new(tokio::sync::Notify::new());
    let _watch = AbortOnDrop(tokio::spawn(watch_secret(secrets.clone(), settings.clone(), wake.clone())));
    let mut c = Controller {
        policy,
        secrets,
        validating: Api::all(client.clone()),
        mutating: Api::all(client),
        served,
        state,
        log: StateLog::default(),
        settings,
    };
    let mut backoff = Backoff::new();
    // Rounds in a row that wrote or lost a race: bounded, in case replicas keep overwriting.
    let mut again = 0u32;
    loop {
        let pause = match c.round().await {
            Ok(Next::Again) if again < 10 => {
                again += 1;
                continue;
            }
            Ok(Next::Again) => {
                again = 0;
                backoff.fail()
            }
            Ok(Next::Until(t)) => {
                again = 0;
                backoff.reset();
                c.log.clear("api", "the API calls succeed again");
                let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
                // Just past the second when a certificate reaches its renewal time.
                let until = Duration::from_secs(t.max(0) as u64) + Duration::from_millis(20);
                until.saturating_sub(now).min(poll)
            }
            Err(e) => {
                again = 0;
                c.log.set("api", e, true);
                backoff.fail()
            }
        };
        tokio::select! {
            _ = wake.notified() => {}
            _ = tokio::time::sleep(pause) => {}
        }
    }
}

impl Controller {
    fn secret_target(&self) -> Target<'_> {
        Target::Secret { namespace: &self.settings.namespace, name: &self.settings.secret }
    }

    /// Reads both webhook configurations: their bundles and resourceVersions. One that cannot be
    /// read is logged (once) and counts as not carrying any CA.
    async fn read_configs(&mut self) -> (Vec<ConfigBundles>, Vec<Option<String>>) {
        /// A configuration as read: resourceVersion, and each webhook's name and caBundle.
        type Read = Result<(Option<String>, Vec<(String, Vec<u8>)>), kube::Error>;
        let name = self.settings.webhook.clone();
        let validating: Read = self.validating.get(&name).await.map(|c| {
            let hooks = c.webhooks.unwrap_or_default().into_iter().map(|w| (w.name, w.client_config.ca_bundle));
            (c.metadata.resource_version, hooks.map(|(n, b)| (n, b.map(|b| b.0).unwrap_or_default())).collect())
        });
        let mutating: Read = self.mutating.get(&name).await.map(|c| {
            let hooks = c.webhooks.unwrap_or_default().into_iter().map(|w| (w.name, w.client_config.ca_bundle));
            (c.metadata.resource_version, hooks.map(|(n, b)| (n, b.map(|b| b.0).unwrap_or_default())).collect())
        });
        let mut configs = Vec::new();
        let mut versions = Vec::new();
        for (kind, topic, read) in [
            ("ValidatingWebhookConfiguration", "validating", validating),
            ("MutatingWebhookConfiguration", "mutating", mutating),
        ] {
            match read {
                Ok((rv, hooks)) => {
                    self.log.clear(topic, &format!("{kind} {name} is readable again"));
                    configs.push(ConfigBundles { kind, name: name.clone(), webhooks: Some(hooks) });
                    versions.push(rv);
                }
                Err(e) => {
                    self.log.set(topic, explain(&e, "get", Target::Webhooks { kind, name: &name }), true);
                    configs.push(ConfigBundles { kind, name: name.clone(), webhooks: None });
                    versions.push(None);
                }
            }
        }
        (configs, versions)
    }

    async fn round(&mut self) -> Result<Next, String> {
        let now = unix_now();
        // The configurations before the Secret: an injection (conditional on the configuration's
        // resourceVersion) then never puts a bundle older than the one another replica put.
        let (configs, versions) = self.read_configs().await;
        let secret = match self.secrets.get(&self.settings.secret).await {
            Ok(s) => s,
            Err(e) => return Err(explain(&e, "get", self.secret_target())),
        };
        let data: SecretData = secret.data.clone().unwrap_or_default().into_iter().map(|(k, v)| (k, v.0)).collect();
        let decision = decide(&data, &configs, &self.policy, now);
        let where_ = format!("Secret {}/{}", self.settings.namespace, self.settings.secret);
        if decision.problems.is_empty() {
            self.log.clear("contents", &format!("{where_}: its contents are usable"));
        } else {
            let fix = if decision.write.is_some() { "replacing what is unusable" } else { "" };
            self.log.set("contents", format!("{where_}: {}; {fix}", decision.problems.join("; ")), true);
        }

        if let Some(change) = &decision.write {
            let written = realize(&data, change, &self.policy, now).map_err(|e| format!("{where_}: {e}"))?;
            let mut updated = secret.clone();
            updated.data = Some(written.into_iter().map(|(k, v)| (k, ByteString(v))).collect());
            updated.string_data = None;
            let params = PostParams { field_manager: Some("ha-guard".into()), ..Default::default() };
            return match self.secrets.replace(&self.settings.secret, &params, &updated).await {
                Ok(after) => {
                    self.log_written(change, &after);
                    Ok(Next::Again)
                }
                Err(kube::Error::Api(s)) if s.code == 409 => {
                    tracing::debug!(
                        "{where_} changed meanwhile (another replica wrote it): deciding again on what it holds"
                    );
                    Ok(Next::Again)
                }
                Err(e) => Err(explain(&e, "update", self.secret_target())),
            };
        }

        let mut injected = false;
        for &i in &decision.inject {
            let config = &configs[i];
            let Some(hooks) = &config.webhooks else { continue };
            let patch = serde_json::json!({
                "metadata": {"resourceVersion": versions[i]},
                "webhooks": hooks.iter().map(|(name, _)| serde_json::json!({
                    "name": name,
                    "clientConfig": {"caBundle": ByteString(decision.bundle.clone())},
                })).collect::<Vec<_>>(),
            });
            let params = PatchParams { field_manager: Some("ha-guard".into()), ..Default::default() };
            let result = match config.kind {
                "ValidatingWebhookConfiguration" => {
                    self.validating.patch(&config.name, &params, &Patch::Strategic(&patch)).await.map(drop)
                }
                _ => self.mutating.patch(&config.name, &params, &Patch::Strategic(&patch)).await.map(drop),
            };
            match result {
                Ok(()) => {
                    let cas = parse_pem_certs(&decision.bundle).into_iter().flatten().count();
                    tracing::info!(
                        configuration = %format!("{} {}", config.kind, config.name),
                        webhooks = hooks.len(),
                        cas,
                        "managed TLS: put the CA bundle into the webhook configuration"
                    );
                    injected = true;
                }
                Err(kube::Error::Api(s)) if s.code == 409 => {
                    tracing::debug!("{} {} changed meanwhile: reading it again", config.kind, config.name);
                    injected = true;
                }
                Err(e) => {
                    let message = explain(&e, "patch", Target::Webhooks { kind: config.kind, name: &config.name });
                    return Err(message);
                }
            }
        }
        if injected {
            return Ok(Next::Again);
        }

        if let Some(s) = &decision.serve {
            match self.served.load(s) {
                Ok(true) => {
                    self.state.metrics.tls_not_after.set(s.leaf.not_after);
                    if let Some(ca) = &s.issuer {
                        self.state.metrics.tls_ca_not_after.get_or_create(&Default::default()).set(ca.not_after);
                    }
                    tracing::info!(
                        serial = %s.leaf.serial,
                        not_after = %rfc3339(s.leaf.not_after),
                        ca = %s.issuer.as_ref().map(Cert::describe).unwrap_or_else(|| "unknown".into()),
                        "managed TLS: serving the certificate from the Secret to new connections"
                    );
                    self.log.clear("load", "the serving certificate loads again");
                }
                Ok(false) => {}
                Err(e) => self.log.set("load", format!("{where_}: cannot serve its certificate: {e}"), true),
            }
        }
        if decision.trusted && self.served.serial().is_some() && !self.state.ready.load(Ordering::SeqCst) {
            self.state.ready.store(true, Ordering::SeqCst);
            tracing::info!(
                "managed TLS: ready: a serving certificate is loaded and both webhook configurations trust its CA"
            );
        }
        match &decision.waiting {
            Some(w) => self.log.set("waiting", w.clone(), false),
            None => self.log.clear("waiting", "the serving certificate comes from the current CA"),
        }
        Ok(Next::Until(decision.recheck_at))
    }

    /// One line per change written.
    fn log_written(&self, change: &SecretChange, after: &Secret) {
        let data = after.data.clone().unwrap_or_default();
        let first = |k: &str| {
            data.get(k)
                .and_then(|v| parse_pem_certs(&v.0).into_iter().next())
                .and_then(Result::ok)
                .map(|c| c.describe())
        };
        let secret = format!("{}/{}", self.settings.namespace, self.settings.secret);
        if let Some(why) = &change.new_ca {
            tracing::info!(secret, ca = %first(CA_CRT).unwrap_or_default(), kept = change.keep.len(), reason = %why, "managed TLS: made a new CA");
        }
        for d in &change.dropped {
            tracing::info!(secret, dropped = %d, "managed TLS: dropped a CA from ca.crt");
        }
        if let Some(why) = &change.issue {
            tracing::info!(secret, certificate = %first(TLS_CRT).unwrap_or_default(), reason = %why, "managed TLS: issued a serving certificate");
        }
    }
}

/// Wakes the controller whenever the Secret changes: a watch of that one Secret (field selector
/// `metadata.name`, so RBAC `resourceNames` authorizes it; no list needed) from the
/// resourceVersion a get of it returned (not from "0" or from none: those ask the apiserver for
/// its current state, which some etcd versions cannot give a watch), resumed from the last
/// version seen, and restarted after errors with backoff. Errors are logged once each.
async fn watch_secret(api: Api<Secret>, settings: Settings, wake: Arc<tokio::sync::Notify>) {
    use futures::StreamExt;
    let mut backoff = Backoff::new();
    let mut log = StateLog::default();
    let target = Target::Secret { namespace: &settings.namespace, name: &settings.secret };
    let params = WatchParams::default().fields(&format!("metadata.name={}", settings.secret)).timeout(290);
    let meanwhile = "ha-guard reads the Secret again every --reload-interval meanwhile";
    loop {
        // Where to start: the Secret's version now (a get); the controller reports a missing one.
        let mut version = match api.get(&settings.secret).await {
            Ok(s) => s.metadata.resource_version.unwrap_or_default(),
            Err(e) => {
                // A missing Secret is the controller's to report.
                if !matches!(&e, kube::Error::Api(s) if s.code == 404) {
                    log.set("watch", format!("{} ({meanwhile})", explain(&e, "get", target)), true);
                }
                tokio::time::sleep(backoff.fail()).await;
                continue;
            }
        };
        // Whatever changed before this version, the controller has yet to see it.
        wake.notify_one();
        loop {
            let stream = match api.watch(&params, &version).await {
                Ok(s) => s,
                Err(e) => {
                    log.set("watch", format!("{} ({meanwhile})", explain(&e, "watch", target)), true);
                    tokio::time::sleep(backoff.fail()).await;
                    break;
                }
            };
            let mut stream = std::pin::pin!(stream);
            let watched = std::time::Instant::now();
            let mut expired = false;
            while let Some(event) = stream.next().await {
                match event {
                    Ok(WatchEvent::Added(s) | WatchEvent::Modified(s) | WatchEvent::Deleted(s)) => {
                        log.clear("watch", "watching the Secret again");
                        if let Some(rv) = s.metadata.resource_version {
                            version = rv;
                        }
                        wake.notify_one();
                    }
                    Ok(WatchEvent::Bookmark(b)) => {
                        log.clear("watch", "watching the Secret again");
                        version = b.metadata.resource_version;
                    }
                    // 410: the version is too old (compacted); start again from a get.
                    Ok(WatchEvent::Error(status)) if status.code == 410 => {
                        expired = true;
                        break;
                    }
                    Ok(WatchEvent::Error(status)) => {
                        let message = format!(
                            "watch Secret {}/{}: {} ({}; {meanwhile})",
                            settings.namespace, settings.secret, status.message, status.code
                        );
                        log.set("watch", message, true);
                        break;
                    }
                    Err(e) => {
                        log.set(
                            "watch",
                            format!("watch Secret {}/{}: {e} ({meanwhile})", settings.namespace, settings.secret),
                            true,
                        );
                        break;
                    }
                }
            }
            if watched.elapsed() < Duration::from_secs(1) {
                // A watch that ends at once again and again must not spin.
                tokio::time::sleep(backoff.fail()).await;
            } else {
                backoff.reset();
            }
            if expired {
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests;
