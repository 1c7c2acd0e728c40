//! The decision of `--tls-mode managed` on crafted Secrets and bundles, and a simulated lifetime
//! of two replicas (renewals, a CA rotation, races on the Secret) in which the certificate
//! served is trusted by the caBundle at every step.

use super::*;

/// "Now" in these tests (2027-01-15), whole seconds.
const T0: i64 = 1_800_000_000;

fn policy(ca: i64, cert: i64) -> Policy {
    Policy::of(&Settings {
        namespace: "ha-guard".into(),
        secret: "ha-guard-tls".into(),
        service: "ha-guard".into(),
        webhook: "ha-guard".into(),
        ca_validity: Duration::from_secs(ca as u64),
        cert_validity: Duration::from_secs(cert as u64),
    })
}

fn p() -> Policy {
    policy(600, 120)
}

/// The two configurations, their webhooks carrying `bundle` (empty: none).
fn configs(bundle: &[u8]) -> Vec<ConfigBundles> {
    vec![
        ConfigBundles {
            kind: "ValidatingWebhookConfiguration",
            name: "ha-guard".into(),
            webhooks: Some(vec![("validate.ha-guard.io".into(), bundle.to_vec())]),
        },
        ConfigBundles {
            kind: "MutatingWebhookConfiguration",
            name: "ha-guard".into(),
            webhooks: Some(vec![
                ("mutate.ha-guard.io".into(), bundle.to_vec()),
                ("other.ha-guard.io".into(), bundle.to_vec()),
            ]),
        },
    ]
}

fn certs_of(pem: &[u8]) -> Vec<Cert> {
    parse_pem_certs(pem).into_iter().map(|c| c.expect("a certificate")).collect()
}

fn get<'a>(s: &'a SecretData, k: &str) -> &'a [u8] {
    s.get(k).map(Vec::as_slice).unwrap_or_default()
}

/// A Secret with a CA valid over `ca` and a serving certificate from it valid over `leaf`.
fn secret_with(ca: (i64, i64), leaf: (i64, i64)) -> (SecretData, Ca) {
    let ca = Ca::generate("ha-guard CA test", at(ca.0).unwrap(), at(ca.1).unwrap()).unwrap();
    let (crt, key) = ca.issue_serving(&p().dns_names, &[], at(leaf.0).unwrap(), at(leaf.1).unwrap()).unwrap();
    let data = SecretData::from([
        (CA_CRT.to_string(), ca.cert_pem.clone().into_bytes()),
        (CA_KEY.to_string(), ca.key_pem.clone().into_bytes()),
        (TLS_CRT.to_string(), crt.into_bytes()),
        (TLS_KEY.to_string(), key.into_bytes()),
    ]);
    (data, ca)
}

/// Applies `d` as the controller does (the Secret first, else the injection).
fn apply(secret: &mut SecretData, cfgs: &mut [ConfigBundles], d: &Decision, policy: &Policy, now: i64) {
    if let Some(change) = &d.write {
        *secret = realize(secret, change, policy, now).expect("realized");
    } else {
        for &i in &d.inject {
            for (_, b) in cfgs[i].webhooks.as_mut().expect("found") {
                *b = d.bundle.clone();
            }
        }
    }
}

#[test]
fn an_empty_secret_gets_a_ca_and_a_certificate_then_the_bundle_then_is_trusted() {
    let policy = p();
    let (mut secret, mut cfgs) = (SecretData::new(), configs(b""));
    let d = decide(&secret, &cfgs, &policy, T0);
    let change = d.write.clone().expect("a write");
    assert_eq!(change.new_ca.as_deref(), Some("the Secret holds no CA yet"));
    assert_eq!(
        change.issue.as_deref(),
        Some("the Secret holds no serving certificate yet"),
        "nothing to protect: at once"
    );
    assert!(d.inject.is_empty() && d.serve.is_none() && !d.trusted && d.problems.is_empty(), "{d:?}");

    apply(&mut secret, &mut cfgs, &d, &policy, T0);
    let cas = certs_of(get(&secret, CA_CRT));
    assert_eq!(cas.len(), 1);
    assert!(cas[0].is_ca && cas[0].not_after == T0 + 600, "{:?}", cas[0]);
    let leaf = &certs_of(get(&secret, TLS_CRT))[0];
    assert!(leaf.signed_by(&cas[0]));
    assert_eq!(leaf.not_after, T0 + 120);
    assert_eq!(leaf.dns_names, policy.dns_names);
    assert!(leaf.dns_names.contains(&"ha-guard.ha-guard.svc".to_string()));

    // The Secret settled: the bundle goes into both configurations (every webhook).
    let d = decide(&secret, &cfgs, &policy, T0);
    assert_eq!((d.write.is_none(), d.inject.clone()), (true, vec![0, 1]), "{d:?}");
    assert_eq!(d.bundle, get(&secret, CA_CRT));
    assert!(d.serve.is_some() && !d.trusted, "served, but not trusted yet: not ready");
    apply(&mut secret, &mut cfgs, &d, &policy, T0);
    let d = decide(&secret, &cfgs, &policy, T0);
    assert!(d.write.is_none() && d.inject.is_empty() && d.trusted, "{d:?}");
    assert_eq!(d.serve.as_ref().and_then(|s| s.issuer.clone()), Some(cas[0].clone()));
    assert_eq!(d.recheck_at, leaf.renew_at(), "wakes up for the renewal");
}

#[test]
fn a_valid_pair_whose_ca_the_bundles_carry_needs_nothing() {
    let (secret, _) = secret_with((T0 - 100, T0 + 500), (T0 - 12, T0 + 120));
    let cfgs = configs(get(&secret, CA_CRT));
    let d = decide(&secret, &cfgs, &p(), T0);
    assert!(d.write.is_none() && d.inject.is_empty() && d.trusted && d.waiting.is_none(), "{d:?}");
    assert!(d.problems.is_empty());
    // 132 s of lifetime: renewed 44 s before its notAfter.
    assert_eq!(d.recheck_at, T0 + 120 - 44);
    // A webhook whose bundle differs gets it; the others too (one patch per configuration).
    let mut cfgs = cfgs;
    cfgs[1].webhooks.as_mut().unwrap()[1].1 = b"stale".to_vec();
    assert_eq!(decide(&secret, &cfgs, &p(), T0).inject, vec![1]);
    // A configuration that cannot be read is not trusted: not ready.
    cfgs[1].webhooks = None;
    let d = decide(&secret, &cfgs, &p(), T0);
    assert!(!d.trusted && d.inject.is_empty() && d.serve.is_some(), "{d:?}");
}

#[test]
fn a_certificate_near_expiry_is_reissued_from_the_same_ca() {
    let policy = p();
    let (mut secret, _) = secret_with((T0 - 100, T0 + 500), (T0 - 12, T0 + 120));
    let mut cfgs = configs(get(&secret, CA_CRT));
    let renew = T0 + 120 - 44;
    assert!(decide(&secret, &cfgs, &policy, renew - 1).write.is_none(), "not before a third remains");
    let d = decide(&secret, &cfgs, &policy, renew);
    let change = d.write.clone().expect("a write");
    assert!(change.new_ca.is_none() && change.dropped.is_empty(), "{change:?}");
    let why = change.issue.expect("re-issued");
    assert!(why.contains("a third of its lifetime remains") && why.contains("serving certificate"), "{why}");
    assert!(d.trusted, "the old one is served until then");

    let before = secret.clone();
    apply(&mut secret, &mut cfgs, &d, &policy, renew);
    assert_eq!(get(&secret, CA_CRT), get(&before, CA_CRT), "ca.crt kept byte for byte");
    assert_eq!(get(&secret, CA_KEY), get(&before, CA_KEY));
    assert_ne!(get(&secret, TLS_CRT), get(&before, TLS_CRT));
    let d = decide(&secret, &cfgs, &policy, renew);
    assert!(d.write.is_none() && d.inject.is_empty() && d.trusted, "nothing to inject: {d:?}");
    assert_eq!(d.serve.unwrap().leaf.not_after, renew + 120);
}

#[test]
fn a_ca_near_expiry_goes_into_the_bundle_first_and_the_certificate_follows() {
    let policy = p();
    let (start, end) = (T0 - 400, T0 + 200); // 600 s: renewed once 200 s remain, i.e. now
    let (mut secret, old_ca) = secret_with((start, end), (T0 - 12, T0 + 120));
    let mut cfgs = configs(get(&secret, CA_CRT));
    let old = certs_of(old_ca.cert_pem.as_bytes()).remove(0);
    assert!(decide(&secret, &cfgs, &policy, T0 - 1).write.is_none());

    // 1. A new CA, first in ca.crt, the old one after it; the serving certificate waits.
    let d = decide(&secret, &cfgs, &policy, T0);
    let change = d.write.clone().expect("a write");
    assert!(change.new_ca.as_deref().unwrap().contains("a third of its lifetime remains"), "{change:?}");
    assert_eq!(change.keep, vec![old.clone()]);
    assert_eq!(change.issue, None, "not while the bundles lack the new CA");
    assert!(d.trusted && d.waiting.is_some());
    apply(&mut secret, &mut cfgs, &d, &policy, T0);
    let cas = certs_of(get(&secret, CA_CRT));
    assert_eq!(cas.len(), 2);
    assert_eq!(cas[1], old);
    let new = cas[0].clone();
    assert!(new.not_after == T0 + 600 && new.subject != old.subject, "{new:?}");

    // 2. The bundle (both CAs) into both configurations; still the old certificate.
    let d = decide(&secret, &cfgs, &policy, T0 + 1);
    assert!(d.write.is_none() && d.inject == vec![0, 1] && d.trusted && d.waiting.is_some(), "{d:?}");
    assert!(d.serve.as_ref().unwrap().leaf.signed_by(&old));
    apply(&mut secret, &mut cfgs, &d, &policy, T0 + 1);

    // 3. Both carry the new CA; once the apiserver has had time to see it (a tenth of the
    // certificate's validity: 12 s), the serving certificate is re-issued from it.
    let d = decide(&secret, &cfgs, &policy, T0 + 11);
    assert!(d.write.is_none() && d.inject.is_empty() && d.trusted, "{d:?}");
    assert!(d.waiting.as_deref().unwrap().contains("carried the new CA for 12s"), "{d:?}");
    assert_eq!(d.recheck_at, T0 + 12);
    let d = decide(&secret, &cfgs, &policy, T0 + 12);
    let change = d.write.clone().expect("a write");
    assert_eq!(change.new_ca, None);
    assert!(change.issue.as_deref().unwrap().contains("not issued by the current CA"), "{change:?}");
    assert!(d.trusted);
    apply(&mut secret, &mut cfgs, &d, &policy, T0 + 12);
    let leaf = certs_of(get(&secret, TLS_CRT)).remove(0);
    assert!(leaf.signed_by(&new) && !leaf.signed_by(&old));

    // 4. Settled; the old CA stays in the bundle until it expires.
    let d = decide(&secret, &cfgs, &policy, T0 + 13);
    assert!(d.write.is_none() && d.inject.is_empty() && d.trusted && d.waiting.is_none(), "{d:?}");
    assert_eq!(d.serve.unwrap().issuer, Some(new.clone()));
    assert_eq!(d.recheck_at, T0 + 12 + 120 - 44, "the next renewal of the certificate comes first");
    assert_eq!(certs_of(&cfgs[0].webhooks.as_ref().unwrap()[0].1), vec![new, old]);
}

#[test]
fn an_expired_ca_leaves_the_bundle() {
    let policy = p();
    let (_, old_ca) = secret_with((T0 - 700, T0 - 1), (T0 - 700, T0 - 600));
    let new_ca = Ca::generate("ha-guard CA new", at(T0 - 200).unwrap(), at(T0 + 400).unwrap()).unwrap();
    let (crt, key) = new_ca.issue_serving(&policy.dns_names, &[], at(T0 - 12).unwrap(), at(T0 + 120).unwrap()).unwrap();
    let mut secret = SecretData::from([
        (CA_CRT.to_string(), format!("{}{}", new_ca.cert_pem, old_ca.cert_pem).into_bytes()),
        (CA_KEY.to_string(), new_ca.key_pem.clone().into_bytes()),
        (TLS_CRT.to_string(), crt.into_bytes()),
        (TLS_KEY.to_string(), key.into_bytes()),
        ("unrelated".to_string(), b"kept".to_vec()),
    ]);
    let mut cfgs = configs(get(&secret, CA_CRT));
    let old = certs_of(old_ca.cert_pem.as_bytes()).remove(0);
    let d = decide(&secret, &cfgs, &policy, T0);
    let change = d.write.clone().expect("a write");
    assert_eq!(change.dropped, vec![format!("{}: expired", old.describe())]);
    assert!(change.new_ca.is_none() && change.issue.is_none() && change.keep.is_empty(), "{change:?}");
    apply(&mut secret, &mut cfgs, &d, &policy, T0);
    assert_eq!(certs_of(get(&secret, CA_CRT)).len(), 1);
    assert_eq!(get(&secret, CA_CRT), new_ca.cert_pem.as_bytes(), "the current CA stays first");
    assert_eq!(get(&secret, CA_KEY), new_ca.key_pem.as_bytes());
    assert_eq!(get(&secret, "unrelated"), b"kept", "other keys are left alone");
    let d = decide(&secret, &cfgs, &policy, T0);
    assert_eq!(d.inject, vec![0, 1], "the smaller bundle goes into the configurations");
}

#[test]
fn garbage_in_the_secret_is_named_and_only_what_is_unusable_is_replaced() {
    let policy = p();
    let (good, _) = secret_with((T0 - 100, T0 + 500), (T0 - 12, T0 + 120));
    let cfgs = configs(get(&good, CA_CRT));

    // tls.crt unreadable, the CA fine: only the serving certificate is issued anew.
    let mut s = good.clone();
    s.insert(TLS_CRT.into(), b"not a certificate".to_vec());
    let d = decide(&s, &cfgs, &policy, T0);
    assert_eq!(d.problems, vec!["tls.crt: no PEM certificate in it".to_string()]);
    let change = d.write.expect("a write");
    assert!(change.new_ca.is_none() && change.dropped.is_empty(), "the CA is usable: kept ({change:?})");
    assert!(change.issue.as_deref().unwrap().starts_with("tls.crt: "), "{change:?}");
    let after = realize(&s, &change, &policy, T0).unwrap();
    assert_eq!((get(&after, CA_CRT), get(&after, CA_KEY)), (get(&good, CA_CRT), get(&good, CA_KEY)));

    // ca.crt not PEM at all: a new CA, and (nothing trusted left to serve) a new certificate.
    let mut s = good.clone();
    s.insert(CA_CRT.into(), b"\x00\x01garbage".to_vec());
    let d = decide(&s, &configs(b""), &policy, T0);
    assert_eq!(d.problems, vec!["ca.crt: certificate 1: no PEM certificate in it".to_string()]);
    let change = d.write.expect("a write");
    assert_eq!(change.new_ca.as_deref(), Some("the first certificate of ca.crt is unreadable"));
    assert!(change.issue.is_some(), "{change:?}");

    // ca.key unreadable: a new CA; the old CA certificate stays in the bundle, and the trusted
    // serving certificate is served until the new CA is in the bundles.
    let mut s = good.clone();
    s.insert(CA_KEY.into(), b"-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n".to_vec());
    let d = decide(&s, &cfgs, &policy, T0);
    assert!(d.problems.len() == 1 && d.problems[0].starts_with("ca.key: "), "{:?}", d.problems);
    let change = d.write.expect("a write");
    assert_eq!(change.new_ca.as_deref(), Some("ca.key is unreadable"));
    assert_eq!(change.keep, certs_of(get(&good, CA_CRT)));
    assert!(change.issue.is_none() && d.trusted && d.waiting.is_some());

    // A broken block after the current CA: dropped, the CA kept.
    let mut s = good.clone();
    let mut bundle = get(&good, CA_CRT).to_vec();
    bundle.extend_from_slice(b"-----BEGIN CERTIFICATE-----\nMIIBkjCB/AIJ\n-----END CERTIFICATE-----\n");
    s.insert(CA_CRT.into(), bundle);
    let d = decide(&s, &cfgs, &policy, T0);
    assert!(d.problems.len() == 1 && d.problems[0].starts_with("ca.crt: certificate 2: "), "{:?}", d.problems);
    let change = d.write.expect("a write");
    assert!(change.new_ca.is_none() && change.issue.is_none(), "{change:?}");
    assert!(change.dropped.len() == 1 && change.dropped[0].starts_with("certificate 2 of ca.crt: unreadable"));
    assert_eq!(get(&realize(&s, &change, &policy, T0).unwrap(), CA_CRT), get(&good, CA_CRT));

    // ca.key of another CA.
    let (other, _) = secret_with((T0 - 100, T0 + 500), (T0 - 12, T0 + 120));
    let mut s = good.clone();
    s.insert(CA_KEY.into(), get(&other, CA_KEY).to_vec());
    let d = decide(&s, &cfgs, &policy, T0);
    assert_eq!(d.problems, vec!["ca.key does not belong to the first certificate of ca.crt".to_string()]);
    assert!(d.write.expect("a write").new_ca.is_some());
}

#[test]
fn a_serving_certificate_whose_key_does_not_match_is_reissued() {
    let policy = p();
    let (good, ca) = secret_with((T0 - 100, T0 + 500), (T0 - 12, T0 + 120));
    let (_, other_key) = ca.issue_serving(&policy.dns_names, &[], at(T0 - 12).unwrap(), at(T0 + 120).unwrap()).unwrap();
    let mut s = good.clone();
    s.insert(TLS_KEY.into(), other_key.into_bytes());
    let cfgs = configs(get(&good, CA_CRT));
    let d = decide(&s, &cfgs, &policy, T0);
    assert_eq!(d.problems, vec!["tls.key does not belong to tls.crt".to_string()]);
    assert!(d.serve.is_none() && !d.trusted, "never served");
    let change = d.write.expect("a write");
    assert_eq!(change.issue.as_deref(), Some("tls.key does not belong to tls.crt"));
    assert!(change.new_ca.is_none());
    let after = realize(&s, &change, &policy, T0).unwrap();
    let d = decide(&after, &cfgs, &policy, T0);
    assert!(d.problems.is_empty() && d.trusted && d.write.is_none(), "{d:?}");
}

#[test]
fn a_certificate_missing_a_name_is_reissued() {
    let policy = p();
    let (secret, _) = secret_with((T0 - 100, T0 + 500), (T0 - 12, T0 + 120));
    let other = Policy { dns_names: vec!["renamed.ha-guard.svc".into()], ..policy };
    let change = decide(&secret, &configs(get(&secret, CA_CRT)), &other, T0).write.expect("a write");
    assert_eq!(change.issue.as_deref(), Some("the serving certificate is not for renamed.ha-guard.svc"));
}

/// The Secret and the configurations as the apiserver holds them, with resourceVersions.
struct World {
    secret: SecretData,
    secret_rv: u64,
    configs: Vec<ConfigBundles>,
    config_rv: Vec<u64>,
}

/// What a replica read.
#[derive(Clone)]
struct Snapshot {
    secret: SecretData,
    secret_rv: u64,
    configs: Vec<ConfigBundles>,
    config_rv: Vec<u64>,
}

impl World {
    fn new() -> World {
        World { secret: SecretData::new(), secret_rv: 1, configs: configs(b""), config_rv: vec![1, 1] }
    }

    fn read(&self) -> Snapshot {
        Snapshot {
            secret: self.secret.clone(),
            secret_rv: self.secret_rv,
            configs: self.configs.clone(),
            config_rv: self.config_rv.clone(),
        }
    }
}

#[derive(Debug, PartialEq)]
enum Acted {
    Wrote,
    Conflict,
    Injected,
    Settled,
}

/// One replica's round on what it read, written as the controller writes (conditional on the
/// resourceVersions it read).
fn act(world: &mut World, read: &Snapshot, policy: &Policy, now: i64, loaded: &mut Option<Serving>) -> Acted {
    let d = decide(&read.secret, &read.configs, policy, now);
    if let Some(change) = &d.write {
        if world.secret_rv != read.secret_rv {
            return Acted::Conflict;
        }
        world.secret = realize(&read.secret, change, policy, now).expect("realized");
        world.secret_rv += 1;
        return Acted::Wrote;
    }
    if !d.inject.is_empty() {
        for &i in &d.inject {
            if world.config_rv[i] != read.config_rv[i] {
                return Acted::Conflict;
            }
            for (_, b) in world.configs[i].webhooks.as_mut().unwrap() {
                *b = d.bundle.clone();
            }
            world.config_rv[i] += 1;
        }
        return Acted::Injected;
    }
    if let Some(s) = d.serve {
        *loaded = Some(s);
    }
    Acted::Settled
}

#[test]
fn two_replicas_racing_on_an_empty_secret_end_with_one_ca() {
    let policy = p();
    let mut world = World::new();
    let (a, b) = (world.read(), world.read());
    let (mut la, mut lb) = (None, None);
    assert_eq!(act(&mut world, &a, &policy, T0, &mut la), Acted::Wrote);
    assert_eq!(act(&mut world, &b, &policy, T0, &mut lb), Acted::Conflict, "b wrote with the version it read");
    let winner = world.secret.clone();
    // b reads again and follows: nothing to write, the bundle to inject.
    let b = world.read();
    assert_eq!(act(&mut world, &b, &policy, T0, &mut lb), Acted::Injected);
    assert_eq!(world.secret, winner);
    assert_eq!(certs_of(get(&world.secret, CA_CRT)).len(), 1);
    let a = world.read();
    assert_eq!(act(&mut world, &a, &policy, T0, &mut la), Acted::Settled);
    let b = world.read();
    assert_eq!(act(&mut world, &b, &policy, T0, &mut lb), Acted::Settled);
    assert_eq!(la, lb, "both serve the same pair");
    assert!(la.is_some());
}

/// Two replicas over three CA lifetimes (CA 300 s, certificate 60 s), a second at a time, each
/// round read by both before either writes (so they race on every change); one replica runs
/// only every third second, so it serves an older pair for a while. The apiserver sees the
/// webhook configurations a second late (as its informer does, a moment after a change). After
/// every write, every certificate a replica serves is valid and signed by a CA in every caBundle
/// the apiserver holds: no handshake would fail at any moment.
#[test]
fn a_simulated_lifetime_never_serves_an_untrusted_certificate() {
    let policy = policy(300, 60);
    let mut world = World::new();
    let mut loaded: [Option<Serving>; 2] = [None, None];
    let (mut cas_seen, mut leaves_seen) = (Vec::<Vec<u8>>::new(), Vec::<Vec<u8>>::new());
    let (mut conflicts, mut max_cas) = (0, 0);
    for now in T0..T0 + 900 {
        let active: Vec<usize> = if (now - T0) % 3 == 0 { vec![0, 1] } else { vec![0] };
        let apiserver = world.configs.clone();
        for _ in 0..20 {
            let reads: Vec<Snapshot> = active.iter().map(|_| world.read()).collect();
            let mut all_settled = true;
            for (r, read) in active.iter().zip(&reads) {
                let acted = act(&mut world, read, &policy, now, &mut loaded[*r]);
                conflicts += usize::from(acted == Acted::Conflict);
                all_settled &= acted == Acted::Settled;
                for (i, l) in loaded.iter().enumerate() {
                    if let Some(s) = l {
                        assert!(now < s.leaf.not_after, "replica {i} serves an expired certificate at +{}", now - T0);
                        // Until the first bundle has reached the apiserver nothing is trusted
                        // there (and no replica is ready, so none is called).
                        let views = if now >= T0 + 2 { vec![&world.configs, &apiserver] } else { vec![&world.configs] };
                        for seen in views {
                            assert!(
                                trusted_by_every_bundle(&s.leaf, seen),
                                "replica {i} serves {} which a caBundle does not trust, at +{}",
                                s.leaf.describe(),
                                now - T0
                            );
                        }
                    }
                }
            }
            if all_settled {
                break;
            }
        }
        let cas = certs_of(get(&world.secret, CA_CRT));
        max_cas = max_cas.max(cas.len());
        assert!(cas.iter().all(|c| now < c.not_after), "an expired CA lingers at +{}", now - T0);
        if !cas_seen.contains(&cas[0].der) {
            cas_seen.push(cas[0].der.clone());
        }
        let leaf = certs_of(get(&world.secret, TLS_CRT)).remove(0).der;
        if !leaves_seen.contains(&leaf) {
            leaves_seen.push(leaf);
        }
        assert!(loaded[0].is_some(), "replica 0 serves from the first second on");
    }
    // 900 s: a CA every 200 s, a certificate every 40 s (or sooner, after a CA rotation).
    assert!(cas_seen.len() >= 5, "CAs: {}", cas_seen.len());
    assert!(leaves_seen.len() >= 22, "serving certificates: {}", leaves_seen.len());
    assert_eq!(max_cas, 2, "the old CA stays until it expires, never longer");
    assert!(conflicts > 0, "the replicas raced");
    eprintln!("{} CAs, {} serving certificates, {conflicts} conflicts", cas_seen.len(), leaves_seen.len());
}

#[test]
fn validity_flags_take_humantime_durations() {
    assert_eq!(parse_validity("90d").unwrap(), Duration::from_secs(90 * 86400));
    assert_eq!(parse_validity("2160h").unwrap(), Duration::from_secs(90 * 86400));
    assert_eq!(parse_validity("20s").unwrap(), Duration::from_secs(20));
    assert_eq!(parse_validity("5y").unwrap(), Duration::from_secs(5 * 31_557_600));
    assert!(parse_validity("5s").unwrap_err().contains("shorter than the minimum of 10s"));
    assert!(parse_validity("ninety").unwrap_err().contains("expected a duration such as 90s"));
    // At most 100 years: past year 9999 no certificate can end (and adding it to now panicked).
    assert_eq!(parse_validity("100y").unwrap(), MAX_VALIDITY);
    for long in ["100y 1s", "101y", "100000y", "5000000000y"] {
        let e = parse_validity(long).unwrap_err();
        assert!(e.contains("longer than the maximum of 100years"), "{long}: {e}");
    }
    assert!(parse_validity("99999999999999999999y").is_err(), "past u64: humantime's own error");
}

#[test]
fn api_errors_name_the_object_and_the_fix() {
    let status = |code: u16, message: &str| {
        kube::Error::Api(Box::new(kube::core::Status { code, message: message.into(), ..Default::default() }))
    };
    let secret = Target::Secret { namespace: "ha-guard", name: "ha-guard-tls" };
    let e = explain(&status(404, "secrets \"ha-guard-tls\" not found"), "get", secret);
    assert!(
        e.contains("Secret ha-guard/ha-guard-tls not found")
            && e.contains("kubectl create secret generic ha-guard-tls -n ha-guard"),
        "{e}"
    );
    let e = explain(&status(403, "forbidden: cannot update"), "update", secret);
    assert!(
        e.starts_with("update Secret ha-guard/ha-guard-tls: forbidden") && e.contains("resourceNames [ha-guard-tls]"),
        "{e}"
    );
    let hooks = Target::Webhooks { kind: "MutatingWebhookConfiguration", name: "ha-guard" };
    let e = explain(&status(403, "no"), "patch", hooks);
    assert!(e.contains("get, patch on mutatingwebhookconfigurations") && e.contains("resourceNames [ha-guard]"), "{e}");
    let e = explain(&status(404, "not found"), "get", hooks);
    assert!(e.contains("MutatingWebhookConfiguration ha-guard not found") && e.contains("--tls-webhook"), "{e}");
}

#[test]
fn the_served_certificate_is_swapped_and_a_mismatched_pair_refused() {
    let policy = p();
    let (secret, _) = secret_with((T0 - 100, T0 + 500), (T0 - 12, T0 + 120));
    let d = decide(&secret, &configs(get(&secret, CA_CRT)), &policy, T0);
    let s = d.serve.expect("usable");
    let served = ServedCert::new();
    assert_eq!(served.serial(), None);
    assert_eq!(served.load(&s), Ok(true));
    assert_eq!(served.load(&s), Ok(false), "the same pair again changes nothing");
    assert_eq!(served.serial(), Some(s.leaf.serial.clone()));
    let (other, _) = secret_with((T0 - 100, T0 + 500), (T0 - 12, T0 + 120));
    let bad = Serving { key_pem: get(&other, TLS_KEY).to_vec(), ..s.clone() };
    assert!(served.load(&bad).is_err());
    assert_eq!(served.serial(), Some(s.leaf.serial), "the good one stays");
}

/// The client CA file in managed mode: a broken file is refused once (counted, the CA in force
/// kept), however long it stays; a good new one is loaded once.
#[tokio::test]
async fn a_client_ca_change_is_counted_once_loaded_or_refused() {
    use super::super::metrics::ResultLabels;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("client-ca.crt");
    let replace = |text: &str| {
        std::fs::write(dir.path().join("tmp"), text).unwrap();
        std::fs::rename(dir.path().join("tmp"), &path).unwrap();
    };
    let ca = |name: &str| crate::server::certs::generate_with_client(&[name.into()], &[], None).unwrap().ca_pem;
    replace(&ca("a"));
    let first = super::super::tls::read_client_ca(&path).unwrap();
    let served = ServedCert::new();
    let config =
        axum_server::tls_rustls::RustlsConfig::from_config(server_config(served.clone(), Some(&first)).unwrap());
    let reloads = prometheus_client::metrics::family::Family::<
        ResultLabels,
        prometheus_client::metrics::counter::Counter,
    >::default();
    let task = tokio::spawn(reload_client_ca(
        path.clone(),
        Duration::from_millis(20),
        served,
        config,
        first.digest,
        reloads.clone(),
    ));
    let count = |result: &'static str| reloads.get_or_create(&ResultLabels { result }).get();
    let wait = async |what: &str, f: &dyn Fn() -> bool| {
        let started = std::time::Instant::now();
        while !f() {
            assert!(started.elapsed() < Duration::from_secs(10), "{what}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!((count("success"), count("failure")), (0, 0), "unchanged: nothing to count");
    replace("not a certificate\n");
    wait("the broken file is refused", &|| count("failure") == 1).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(count("failure"), 1, "refused once, not at every look");
    replace(&ca("b"));
    wait("the new CA is loaded", &|| count("success") == 1).await;
    assert_eq!(count("failure"), 1);
    task.abort();
}
