//! The standard `process_*` metrics (as Prometheus' Go and Python clients export them), read from
//! /proc at each scrape with the procfs crate. prometheus-client has no process collector, and
//! the one made for it (kubert-prometheus-process) is built on an older prometheus-client whose
//! registry is another type. Off Linux there are none.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Unit;

/// Reads this process's figures at each scrape.
#[derive(Debug, Default)]
pub struct ProcessCollector;

/// This process's figures, as the metrics report them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Figures {
    pub cpu_seconds: f64,
    pub resident_bytes: i64,
    pub virtual_bytes: i64,
    pub open_fds: i64,
    /// `None`: unlimited.
    pub max_fds: Option<i64>,
    pub threads: i64,
    pub start_time_seconds: f64,
}

#[cfg(target_os = "linux")]
pub fn figures() -> Option<Figures> {
    let me = procfs::process::Process::myself().ok()?;
    let stat = me.stat().ok()?;
    let ticks = procfs::ticks_per_second() as f64;
    let boot = procfs::boot_time_secs().ok()? as f64;
    let max_fds = match me.limits().ok()?.max_open_files.soft_limit {
        procfs::process::LimitValue::Unlimited => None,
        procfs::process::LimitValue::Value(n) => Some(i64::try_from(n).unwrap_or(i64::MAX)),
    };
    let int = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    Some(Figures {
        cpu_seconds: (stat.utime + stat.stime) as f64 / ticks,
        resident_bytes: int(stat.rss.saturating_mul(procfs::page_size())),
        virtual_bytes: int(stat.vsize),
        open_fds: int(me.fd_count().ok()? as u64),
        max_fds,
        threads: stat.num_threads,
        start_time_seconds: boot + stat.starttime as f64 / ticks,
    })
}

#[cfg(not(target_os = "linux"))]
pub fn figures() -> Option<Figures> {
    None
}

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        // Unreadable /proc (not mounted, hidepid): no samples rather than a failed scrape.
        let Some(f) = figures() else { return Ok(()) };
        let cpu = ConstCounter::new(f.cpu_seconds);
        cpu.encode(encoder.encode_descriptor(
            "process_cpu",
            "Total user and system CPU time spent in seconds.",
            Some(&Unit::Seconds),
            cpu.metric_type(),
        )?)?;
        let gauges: [(&str, &str, Option<Unit>, Option<f64>); 6] = [
            (
                "process_resident_memory",
                "Resident memory size in bytes.",
                Some(Unit::Bytes),
                Some(f.resident_bytes as f64),
            ),
            (
                "process_virtual_memory",
                "Virtual memory size in bytes.",
                Some(Unit::Bytes),
                Some(f.virtual_bytes as f64),
            ),
            ("process_open_fds", "Number of open file descriptors.", None, Some(f.open_fds as f64)),
            ("process_max_fds", "Maximum number of open file descriptors.", None, f.max_fds.map(|n| n as f64)),
            ("process_threads", "Number of OS threads in the process.", None, Some(f.threads as f64)),
            (
                "process_start_time",
                "Start time of the process since unix epoch in seconds.",
                Some(Unit::Seconds),
                Some(f.start_time_seconds),
            ),
        ];
        for (name, help, unit, value) in &gauges {
            let Some(value) = value else { continue };
            let gauge = ConstGauge::new(*value);
            gauge.encode(encoder.encode_descriptor(name, help, unit.as_ref(), gauge.metric_type())?)?;
        }
        Ok(())
    }
}
