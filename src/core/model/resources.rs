//! What a pod asks of a node, as kube-scheduler reads it: its resource requests
//! (`NodeResourcesFit`), its host ports (`NodePorts`), and the quantities they are written in.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, PodSpec};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// Resources as the scheduler sums them: CPU in millicores, the rest in bytes (or a count).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Resources {
    pub cpu_milli: i64,
    pub memory: i64,
    pub ephemeral_storage: i64,
    /// Extended resources and hugepages, by name.
    pub scalar: BTreeMap<String, i64>,
}

impl Resources {
    /// Sets the resources `names` (Kubernetes names: `cpu`, `memory`, others) to their values in `o`.
    pub fn replace(&mut self, names: &[String], o: &Resources) {
        for name in names {
            match name.as_str() {
                "cpu" => self.cpu_milli = o.cpu_milli,
                "memory" => self.memory = o.memory,
                "ephemeral-storage" => self.ephemeral_storage = o.ephemeral_storage,
                other => {
                    self.scalar.insert(other.to_string(), o.scalar.get(other).copied().unwrap_or(0));
                }
            }
        }
    }

    pub fn add(&mut self, o: &Resources) {
        self.cpu_milli = self.cpu_milli.saturating_add(o.cpu_milli);
        self.memory = self.memory.saturating_add(o.memory);
        self.ephemeral_storage = self.ephemeral_storage.saturating_add(o.ephemeral_storage);
        for (k, v) in &o.scalar {
            let e = self.scalar.entry(k.clone()).or_default();
            *e = e.saturating_add(*v);
        }
    }

    pub fn max(&mut self, o: &Resources) {
        self.cpu_milli = self.cpu_milli.max(o.cpu_milli);
        self.memory = self.memory.max(o.memory);
        self.ephemeral_storage = self.ephemeral_storage.max(o.ephemeral_storage);
        for (k, v) in &o.scalar {
            let e = self.scalar.entry(k.clone()).or_default();
            *e = (*e).max(*v);
        }
    }

    pub fn is_zero(&self) -> bool {
        self.cpu_milli == 0 && self.memory == 0 && self.ephemeral_storage == 0 && self.scalar.values().all(|v| *v == 0)
    }

    /// From a resource list (`requests`, `allocatable`, `overhead`): values that are no quantity
    /// count as 0; values past `i64` as `i64::MAX`, which no node has room for.
    pub fn of(list: Option<&BTreeMap<String, Quantity>>) -> Resources {
        let mut r = Resources::default();
        for (name, q) in list.into_iter().flatten() {
            match name.as_str() {
                "cpu" => r.cpu_milli = quantity_milli(&q.0).unwrap_or(0),
                "memory" => r.memory = quantity(&q.0).unwrap_or(0),
                "ephemeral-storage" => r.ephemeral_storage = quantity(&q.0).unwrap_or(0),
                "pods" => {}
                other => {
                    r.scalar.insert(other.to_string(), quantity(&q.0).unwrap_or(0));
                }
            }
        }
        r
    }
}

/// A pod's request as the scheduler computes it (`k8s.io/component-helpers/resource`): the larger
/// of the containers' sum (sidecars, restartable init containers, included) and each init
/// container with the sidecars declared before it; then the pod's overhead. Of the pod as the
/// apiserver stores it: a container's request missing where its limit is set is the limit
/// (`SetDefaults_Pod`, which a Pod gets and a template does not, so a workload's replicas are
/// placed with it). A stored Pod has them already: defaulting it again changes nothing.
pub fn pod_requests(spec: &PodSpec) -> Resources {
    let requests = |c: &Container| {
        let resources = c.resources.as_ref();
        let (requests, limits) =
            (resources.and_then(|r| r.requests.as_ref()), resources.and_then(|r| r.limits.as_ref()));
        match limits {
            Some(limits) if limits.keys().any(|k| !requests.is_some_and(|r| r.contains_key(k))) => {
                let mut defaulted = requests.cloned().unwrap_or_default();
                for (k, v) in limits {
                    defaulted.entry(k.clone()).or_insert_with(|| v.clone());
                }
                Resources::of(Some(&defaulted))
            }
            _ => Resources::of(requests),
        }
    };
    let mut sum = Resources::default();
    for c in &spec.containers {
        sum.add(&requests(c));
    }
    let mut sidecars = Resources::default();
    let mut init_peak = Resources::default();
    for c in spec.init_containers.iter().flatten() {
        if c.restart_policy.as_deref() == Some("Always") {
            sidecars.add(&requests(c));
        } else {
            let mut with = requests(c);
            with.add(&sidecars);
            init_peak.max(&with);
        }
    }
    sum.add(&sidecars);
    sum.max(&init_peak);
    if let Some(pod_level) = pod_level_requests(spec, &sum) {
        sum.replace(&pod_level.0, &pod_level.1);
    }
    sum.add(&Resources::of(spec.overhead.as_ref()));
    sum
}

/// Whether pod-level resources (`spec.resources`) may set `name`: CPU, memory and huge pages
/// (`IsSupportedPodLevelResource`, `k8s.io/component-helpers/resource`).
fn pod_level_resource(name: &str) -> bool {
    matches!(name, "cpu" | "memory") || name.starts_with("hugepages-")
}

/// The pod-level requests that replace the containers' sum (`PodRequests`'
/// `applyPodLevelResources`), as the apiserver stores them: an explicit request; else, where the
/// pod sets limits, the containers' sum for CPU and memory where they request any (left as it
/// is; a sum of 0 is taken as none), and the pod-level limit where they do not, or for huge pages
/// (`defaultPodRequests`). The names set, and their values parsed.
fn pod_level_requests(spec: &PodSpec, containers: &Resources) -> Option<(Vec<String>, Resources)> {
    let resources = spec.resources.as_ref()?;
    let mut effective: BTreeMap<String, Quantity> = BTreeMap::new();
    for (name, q) in resources.requests.iter().flatten().filter(|(n, _)| pod_level_resource(n)) {
        effective.insert(name.clone(), q.clone());
    }
    for (name, q) in resources.limits.iter().flatten().filter(|(n, _)| pod_level_resource(n)) {
        let from_containers = match name.as_str() {
            "cpu" => containers.cpu_milli > 0,
            "memory" => containers.memory > 0,
            _ => false,
        };
        if !from_containers {
            effective.entry(name.clone()).or_insert_with(|| q.clone());
        }
    }
    (!effective.is_empty()).then(|| (effective.keys().cloned().collect(), Resources::of(Some(&effective))))
}

/// A Kubernetes quantity (`500m`, `2`, `1Gi`, `128M`, `1e3`) in whole units, rounded away from
/// zero as `resource.Quantity`'s `Value()` is; `None` for a string the apiserver refuses
/// ([`parse_quantity`]). Surrounding spaces are dropped, as the apiserver's JSON decoding does. A
/// value past `i64` saturates at `i64::MAX`: more than any node has, never 0.
pub fn quantity(s: &str) -> Option<i64> {
    parse_quantity(s.trim()).ok().map(|a| a.scaled(0))
}

/// [`quantity`] in thousandths (CPU in millicores), as `MilliValue()`.
pub fn quantity_milli(s: &str) -> Option<i64> {
    parse_quantity(s.trim()).ok().map(|a| a.scaled(3))
}

/// Why the apiserver refuses a quantity: `resource.ParseQuantity`'s errors, in its words.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QuantityError {
    /// `ErrFormatWrong`: not a number followed by a suffix.
    Format,
    /// `ErrNumeric`: a suffix without a number where the value cannot be 0.
    Numeric,
    /// `ErrSuffix`: a suffix that is none of `n u m k M G T P E`, `Ki Mi Gi Ti Pi Ei`, or an
    /// exponent `e`/`E` with a signed integer (one past `i64` included).
    Suffix,
}

impl std::fmt::Display for QuantityError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            QuantityError::Format => {
                "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
            }
            QuantityError::Numeric => "unable to parse numeric part of quantity",
            QuantityError::Suffix => "unable to parse quantity's suffix",
        })
    }
}

/// A quantity exactly as written: `digits × 10^exp10 × 2^exp2`, any size (`1e30`, `9Ei`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Amount {
    pub negative: bool,
    /// The decimal digits, without leading zeros (empty for 0).
    pub digits: String,
    pub exp10: i64,
    pub exp2: u32,
}

/// Written here: `kube_quantity` (arithmetic on k8s-openapi's `Quantity`) reads the number as an
/// `f64` into a 96-bit decimal, so it refuses `1e30`, `1E` and `1Ei`, rounds
/// `9223372036854775807` and truncates `100m` or `100.035Ki` to whole units.
///
/// Parses a quantity as `resource.ParseQuantity` (k8s.io/apimachinery) does: an optional sign,
/// digits with an optional fraction (`1.`, `.5` included), then one suffix: decimal SI (`n u m k
/// M G T P E`), binary SI (`Ki Mi Gi Ti Pi Ei`) or a decimal exponent (`e3`, `E-2`, `e+6`). No
/// space is allowed. Where upstream keeps its exponent in 32 bits (wrapping one past it), the
/// exponent written is kept.
pub fn parse_quantity(s: &str) -> Result<Amount, QuantityError> {
    let b = s.as_bytes();
    if b.is_empty() {
        return Err(QuantityError::Format);
    }
    let digit = |i: usize| b.get(i).is_some_and(u8::is_ascii_digit);
    let mut pos = 0;
    let negative = b[0] == b'-';
    if matches!(b[0], b'-' | b'+') {
        pos += 1;
    }
    let number_start = pos;
    while digit(pos) {
        pos += 1;
    }
    let int = &s[number_start..pos];
    let mut frac = "";
    if b.get(pos) == Some(&b'.') {
        pos += 1;
        let start = pos;
        while digit(pos) {
            pos += 1;
        }
        frac = &s[start..pos];
    }
    let had_digit = !int.is_empty() || !frac.is_empty();
    // The suffix: letters of a suffix, then an exponent's sign and digits; nothing after.
    let suffix_start = pos;
    while b.get(pos).is_some_and(|c| b"eEinumkKMGTP".contains(c)) {
        pos += 1;
    }
    if matches!(b.get(pos), Some(b'-' | b'+')) {
        pos += 1;
    }
    while digit(pos) {
        pos += 1;
    }
    if pos < b.len() {
        return Err(QuantityError::Format);
    }
    let suffix = &s[suffix_start..];
    let (exp10, exp2): (i64, u32) = match suffix {
        "n" => (-9, 0),
        "u" => (-6, 0),
        "m" => (-3, 0),
        "" => (0, 0),
        "k" => (3, 0),
        "M" => (6, 0),
        "G" => (9, 0),
        "T" => (12, 0),
        "P" => (15, 0),
        "E" => (18, 0),
        "Ki" => (0, 10),
        "Mi" => (0, 20),
        "Gi" => (0, 30),
        "Ti" => (0, 40),
        "Pi" => (0, 50),
        "Ei" => (0, 60),
        e if e.len() > 1 && e.starts_with(['e', 'E']) => (e[1..].parse().map_err(|_| QuantityError::Suffix)?, 0),
        _ => return Err(QuantityError::Suffix),
    };
    // Upstream reads a number without digits as 0 where its int64 fast path takes the value, and
    // refuses it where it falls back to its decimal type (below nano, or 2^50 and up).
    if !had_digit && (exp10 < -9 || exp2 >= 50) {
        return Err(QuantityError::Numeric);
    }
    let digits = format!("{int}{frac}").trim_start_matches('0').to_string();
    let exp10 = exp10.saturating_sub(frac.len() as i64);
    Ok(Amount { negative: negative && !digits.is_empty(), digits, exp10, exp2 })
}

impl Amount {
    /// The value in units of `10^-decimals`, rounded away from zero (as `ScaledValue` rounds, and
    /// as the apiserver already rounds to `1n`), saturating at `±i64::MAX`.
    pub fn scaled(&self, decimals: i64) -> i64 {
        if self.digits.is_empty() {
            return 0;
        }
        // The digits times 2^exp2, exactly: one pass with the carry (2^60 × 9 fits in u128).
        let mut digits: Vec<u8> = self.digits.bytes().map(|c| c - b'0').collect();
        if self.exp2 > 0 {
            let mut carry: u128 = 0;
            for d in digits.iter_mut().rev() {
                let v = u128::from(*d) * (1u128 << self.exp2) + carry;
                *d = (v % 10) as u8;
                carry = v / 10;
            }
            let mut high = Vec::new();
            while carry > 0 {
                high.push((carry % 10) as u8);
                carry /= 10;
            }
            high.reverse();
            high.extend(digits);
            digits = high;
        }
        let exp = i128::from(self.exp10) + i128::from(decimals);
        let len = digits.len() as i128;
        // The integer part's digits (the leading one is not 0) and whether a fraction is left.
        let (int, fraction) = if exp >= 0 {
            if len + exp > 19 {
                return self.signed(i64::MAX);
            }
            let mut all = digits.clone();
            all.extend(std::iter::repeat_n(0, exp as usize));
            (all, false)
        } else if len + exp <= 0 {
            (Vec::new(), true)
        } else {
            let cut = (len + exp) as usize;
            (digits[..cut].to_vec(), digits[cut..].iter().any(|d| *d != 0))
        };
        if int.len() > 19 {
            return self.signed(i64::MAX);
        }
        let whole = int.iter().fold(0u128, |v, d| v * 10 + u128::from(*d)) + u128::from(fraction);
        self.signed(i64::try_from(whole).unwrap_or(i64::MAX))
    }

    fn signed(&self, v: i64) -> i64 {
        if self.negative { -v } else { v }
    }
}

/// A host port a pod asks for (`NodePorts`): protocol (TCP when unset), IP (0.0.0.0 when unset).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct HostPort {
    pub protocol: String,
    pub ip: String,
    pub port: i32,
}

/// The host ports of a pod: its containers' and sidecars' (ordinary init containers release
/// theirs); with hostNetwork every container port is one.
pub fn host_ports(spec: &PodSpec) -> Vec<HostPort> {
    let host_network = spec.host_network == Some(true);
    let sidecars = spec.init_containers.iter().flatten().filter(|c| c.restart_policy.as_deref() == Some("Always"));
    spec.containers
        .iter()
        .chain(sidecars)
        .flat_map(|c| c.ports.iter().flatten())
        .filter_map(|p| {
            let port = p.host_port.filter(|h| *h > 0).or(host_network.then_some(p.container_port))?;
            Some(HostPort {
                protocol: p.protocol.clone().filter(|s| !s.is_empty()).unwrap_or_else(|| "TCP".into()),
                ip: p.host_ip.clone().filter(|s| !s.is_empty()).unwrap_or_else(|| "0.0.0.0".into()),
                port,
            })
        })
        .collect()
}

/// Two host ports that cannot share a node: same protocol and port, and the same IP or either
/// one the wildcard 0.0.0.0.
pub fn ports_conflict(a: &HostPort, b: &HostPort) -> bool {
    a.protocol == b.protocol && a.port == b.port && (a.ip == b.ip || a.ip == "0.0.0.0" || b.ip == "0.0.0.0")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(yaml: &str) -> PodSpec {
        serde_saphyr::from_str(yaml).expect("a pod spec")
    }

    #[test]
    fn quantities_as_kubernetes_writes_them() {
        assert_eq!(quantity_milli("500m"), Some(500));
        assert_eq!(quantity_milli("2"), Some(2000));
        assert_eq!(quantity_milli("0.25"), Some(250));
        assert_eq!(quantity("1Gi"), Some(1 << 30));
        assert_eq!(quantity("128M"), Some(128_000_000));
        assert_eq!(quantity("1e3"), Some(1000));
        assert_eq!(quantity("1.5Ki"), Some(1536));
        assert_eq!(quantity("100m"), Some(1), "a fraction of a byte rounds up");
        assert_eq!(quantity("lots"), None);
    }

    /// `TestQuantityParse`'s table (k8s.io/apimachinery/pkg/api/resource/quantity_test.go, valid
    /// and invalid inputs) and edge cases past it, each with `Value()` and `MilliValue()` as
    /// apimachinery v0.37.2 computes them exactly (its `inf.Dec`, rounded up); where that is past
    /// `i64` (upstream's `Value()` then wraps or gives 0), `i64::MAX`. Errors in upstream's kind.
    #[test]
    fn quantities_parse_as_resource_quantity_does() {
        use QuantityError::*;
        const MAX: i64 = i64::MAX;
        /// A quantity as written, and its (value, milli value) or the error.
        type Case = (&'static str, Result<(i64, i64), QuantityError>);
        let table: &[Case] = &[
            ("0", Ok((0, 0))),
            ("0n", Ok((0, 0))),
            ("0u", Ok((0, 0))),
            ("0m", Ok((0, 0))),
            ("0Ki", Ok((0, 0))),
            ("0k", Ok((0, 0))),
            ("0Mi", Ok((0, 0))),
            ("0M", Ok((0, 0))),
            ("0Gi", Ok((0, 0))),
            ("0G", Ok((0, 0))),
            ("0Ti", Ok((0, 0))),
            ("0T", Ok((0, 0))),
            ("1", Ok((1, 1000))),
            ("1Ki", Ok((1024, 1024000))),
            ("8Ki", Ok((8192, 8192000))),
            ("7Mi", Ok((7340032, 7340032000))),
            ("6Gi", Ok((6442450944, 6442450944000))),
            ("5Ti", Ok((5497558138880, 5497558138880000))),
            ("4Pi", Ok((4503599627370496, 4503599627370496000))),
            ("3Ei", Ok((3458764513820540928, MAX))),
            ("10Ti", Ok((10995116277760, 10995116277760000))),
            ("100Ti", Ok((109951162777600, 109951162777600000))),
            ("5n", Ok((1, 1))),
            ("4u", Ok((1, 1))),
            ("3m", Ok((1, 3))),
            ("9", Ok((9, 9000))),
            ("8k", Ok((8000, 8000000))),
            ("50k", Ok((50000, 50000000))),
            ("7M", Ok((7000000, 7000000000))),
            ("6G", Ok((6000000000, 6000000000000))),
            ("5T", Ok((5000000000000, 5000000000000000))),
            ("40T", Ok((40000000000000, 40000000000000000))),
            ("300T", Ok((300000000000000, 300000000000000000))),
            ("2P", Ok((2000000000000000, 2000000000000000000))),
            ("1E", Ok((1000000000000000000, MAX))),
            ("1E-3", Ok((1, 1))),
            ("1e3", Ok((1000, 1000000))),
            ("1E6", Ok((1000000, 1000000000))),
            ("1e9", Ok((1000000000, 1000000000000))),
            ("1E12", Ok((1000000000000, 1000000000000000))),
            ("1e15", Ok((1000000000000000, 1000000000000000000))),
            ("1E18", Ok((1000000000000000000, MAX))),
            ("1e14", Ok((100000000000000, 100000000000000000))),
            ("1e13", Ok((10000000000000, 10000000000000000))),
            ("100.035k", Ok((100035, 100035000))),
            ("0.001", Ok((1, 1))),
            ("0.0005k", Ok((1, 500))),
            ("0.005", Ok((1, 5))),
            ("0.05", Ok((1, 50))),
            ("0.5", Ok((1, 500))),
            ("0.00050k", Ok((1, 500))),
            ("0.00500", Ok((1, 5))),
            ("0.05000", Ok((1, 50))),
            ("0.50000", Ok((1, 500))),
            ("0.5e0", Ok((1, 500))),
            ("0.5e-1", Ok((1, 50))),
            ("0.5e-2", Ok((1, 5))),
            ("10.035M", Ok((10035000, 10035000000))),
            ("1.2e3", Ok((1200, 1200000))),
            ("1.3E+6", Ok((1300000, 1300000000))),
            ("1.40e9", Ok((1400000000, 1400000000000))),
            ("1.53E12", Ok((1530000000000, 1530000000000000))),
            ("1.6e15", Ok((1600000000000000, 1600000000000000000))),
            ("1.7E18", Ok((1700000000000000000, MAX))),
            ("9.01", Ok((10, 9010))),
            ("8.1k", Ok((8100, 8100000))),
            ("7.123456M", Ok((7123456, 7123456000))),
            ("6.987654321G", Ok((6987654321, 6987654321000))),
            ("5.444T", Ok((5444000000000, 5444000000000000))),
            ("40.1T", Ok((40100000000000, 40100000000000000))),
            ("300.2T", Ok((300200000000000, 300200000000000000))),
            ("2.5P", Ok((2500000000000000, 2500000000000000000))),
            ("1.01E", Ok((1010000000000000000, MAX))),
            ("3.001n", Ok((1, 1))),
            ("1.1E-9", Ok((1, 1))),
            ("0.0000000001", Ok((1, 1))),
            ("0.0000000005", Ok((1, 1))),
            ("0.00000000050", Ok((1, 1))),
            ("0.5e-9", Ok((1, 1))),
            ("0.9n", Ok((1, 1))),
            ("0.00000012345", Ok((1, 1))),
            ("0.00000012354", Ok((1, 1))),
            ("9Ei", Ok((9223372036854775807, MAX))),
            ("9223372036854775807Ki", Ok((9223372036854775807, MAX))),
            ("12E", Ok((MAX, MAX))),
            ("100.035Ki", Ok((102436, 102435840))),
            ("0.5Mi", Ok((524288, 524288000))),
            ("0.05Gi", Ok((53687092, 53687091200))),
            ("0.025Ti", Ok((27487790695, 27487790694400))),
            ("0.000000000001Ki", Ok((1, 1))),
            (".001", Ok((1, 1))),
            (".0001k", Ok((1, 100))),
            ("1.", Ok((1, 1000))),
            ("1.G", Ok((1000000000, 1000000000000))),
            ("1.1.M", Err(Format)),
            ("1+1.0M", Err(Format)),
            ("0.1mi", Err(Suffix)),
            ("0.1am", Err(Format)),
            ("aoeu", Err(Format)),
            (".5i", Err(Suffix)),
            ("1i", Err(Suffix)),
            ("-3.01i", Err(Suffix)),
            ("-3.01e-", Err(Suffix)),
            (" 1", Err(Format)),
            ("1 ", Err(Format)),
            ("", Err(Format)),
            ("1e30", Ok((MAX, MAX))),
            ("1e19", Ok((MAX, MAX))),
            ("9223372036854775807", Ok((9223372036854775807, MAX))),
            ("9223372036854775808", Ok((MAX, MAX))),
            ("9223372036854775807m", Ok((9223372036854776, 9223372036854775807))),
            ("9223372036854775808m", Ok((9223372036854776, MAX))),
            ("8Ei", Ok((9223372036854775807, MAX))),
            ("7Ei", Ok((8070450532247928832, MAX))),
            ("-1", Ok((-1, -1000))),
            ("-1.5", Ok((-2, -1500))),
            ("-1e30", Ok((-MAX, -MAX))),
            ("1e-30", Ok((1, 1))),
            ("1e", Err(Suffix)),
            ("1e+", Err(Suffix)),
            ("Pi", Err(Numeric)),
            ("Ti", Ok((0, 0))),
            (".e-10", Err(Numeric)),
            ("+.Ei", Err(Numeric)),
            ("1ki", Err(Suffix)),
            ("1K", Err(Suffix)),
            ("1e99999999999999999999", Err(Suffix)),
            ("5.5e2Ki", Err(Format)),
            ("1E+2", Ok((100, 100000))),
            ("0e999", Ok((0, 0))),
        ];
        for (input, want) in table {
            let got = parse_quantity(input).map(|a| (a.scaled(0), a.scaled(3)));
            assert_eq!(&got, want, "{input:?}");
        }
    }

    #[test]
    fn errors_say_what_the_apiserver_says() {
        assert_eq!(parse_quantity("1K").unwrap_err().to_string(), "unable to parse quantity's suffix");
        assert_eq!(parse_quantity("Pi").unwrap_err().to_string(), "unable to parse numeric part of quantity");
        assert!(parse_quantity("1 Gi").unwrap_err().to_string().starts_with("quantities must match the regular"));
    }

    /// Beyond `i64` a quantity is more than any node has: never 0, never ignored. Surrounding
    /// spaces are dropped as the apiserver's JSON decoding drops them.
    #[test]
    fn a_quantity_past_i64_saturates_and_spaces_around_are_dropped() {
        assert_eq!(quantity("1e30"), Some(i64::MAX));
        assert_eq!(quantity_milli("1E"), Some(i64::MAX));
        assert_eq!(quantity("1e2147483648"), Some(i64::MAX), "an exponent past 32 bits is kept, not wrapped");
        assert_eq!(quantity("1e-2147483649"), Some(1));
        assert_eq!(quantity(&format!("0.{}1", "0".repeat(5000))), Some(1));
        assert_eq!(quantity(&format!("1{}", "0".repeat(5000))), Some(i64::MAX));
        assert_eq!(quantity(" 2Gi "), Some(2 << 30));
        let r = Resources::of(Some(&BTreeMap::from([
            ("memory".to_string(), Quantity("1e30".into())),
            ("cpu".to_string(), Quantity("1E".into())),
            ("nvidia.com/gpu".to_string(), Quantity("8Ei".into())),
            ("ephemeral-storage".to_string(), Quantity("lots".into())),
        ])));
        assert_eq!((r.memory, r.cpu_milli, r.scalar["nvidia.com/gpu"]), (i64::MAX, i64::MAX, i64::MAX));
        assert_eq!(r.ephemeral_storage, 0, "a malformed quantity counts as 0, as before");
    }

    /// `SetDefaults_Pod`: a request missing where the limit is set is the limit, per resource,
    /// for containers and init containers; a request set is kept.
    #[test]
    fn a_limit_without_its_request_is_the_request_as_a_pod_is_stored() {
        let s = spec(
            "containers:\n- {name: a, image: x, resources: {limits: {cpu: '2', memory: 1Gi}, requests: {cpu: 500m}}}\n\
             - {name: b, image: x, resources: {limits: {cpu: 250m}}}\n\
             initContainers:\n- {name: i, image: x, resources: {limits: {cpu: '4'}}}",
        );
        let r = pod_requests(&s);
        assert_eq!(r.cpu_milli, 4000, "the init container's limit, defaulted, is the largest");
        assert_eq!(r.memory, 1 << 30, "a's memory limit is its request");
        let s = spec("containers:\n- {name: a, image: x, resources: {limits: {cpu: '2'}, requests: {cpu: 500m}}}");
        assert_eq!(pod_requests(&s).cpu_milli, 500, "a request set is kept");
        let s = spec("containers:\n- {name: a, image: x}");
        assert!(pod_requests(&s).is_zero());
    }

    #[test]
    fn requests_sum_containers_and_sidecars_against_the_largest_init_container() {
        let s = spec(
            "containers:\n- {name: a, image: x, resources: {requests: {cpu: 100m, memory: 64Mi}}}\n- {name: b, image: x, \
             resources: {requests: {cpu: 200m}}}\ninitContainers:\n- {name: side, image: x, restartPolicy: Always, \
             resources: {requests: {cpu: 50m}}}\n- {name: migrate, image: x, resources: {requests: {cpu: '1'}}}\n",
        );
        let r = pod_requests(&s);
        assert_eq!((r.cpu_milli, r.memory), (1050, 64 << 20), "max(100+200+50, 1000+50) millicores");
    }

    /// `PodRequests` with pod-level resources (`k8s.io/component-helpers/resource`; the
    /// PodLevelResources gate is on from 1.34): the pod's requests for CPU, memory and huge pages
    /// replace the containers' sum; where it sets only limits, `defaultPodRequests` takes the
    /// containers' sum where they request the resource and the pod-level limit where they do not;
    /// another resource (ephemeral storage) stays the containers'; the overhead is added on top.
    #[test]
    fn pod_level_resources_replace_the_containers_sum_as_the_scheduler_reads_them() {
        let containers =
            "containers:\n- {name: a, image: x, resources: {requests: {cpu: 100m, ephemeral-storage: 1Gi}}}\n";
        let with = |resources: &str| {
            pod_requests(&spec(&format!("{containers}resources: {resources}\noverhead: {{cpu: 10m}}")))
        };
        let r = with("{requests: {cpu: '2', memory: 1Gi}}");
        assert_eq!((r.cpu_milli, r.memory, r.ephemeral_storage), (2010, 1 << 30, 1 << 30), "pod-level, then overhead");
        // Limits only: CPU the containers request stays theirs; memory they do not comes from the limit.
        let r = with("{limits: {cpu: '4', memory: 2Gi}}");
        assert_eq!((r.cpu_milli, r.memory), (110, 2 << 30));
        // A resource pod-level resources cannot set is ignored there.
        let r = with("{requests: {ephemeral-storage: 5Gi}}");
        assert_eq!((r.cpu_milli, r.ephemeral_storage), (110, 1 << 30));
        // Huge pages: the pod-level limit, whatever the containers ask.
        let r = with("{limits: {hugepages-2Mi: 4Mi, memory: 1Gi}}");
        assert_eq!((r.scalar.get("hugepages-2Mi").copied(), r.memory), (Some(4 << 20), 1 << 30));
        // None set: the containers' sum.
        assert_eq!(with("{}").cpu_milli, 110);
    }
}
