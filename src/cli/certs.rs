//! `ha-guard certs`: a serving certificate signed by a CA (kept in the same folder, so a rotation
//! keeps the caBundle valid), as a Kubernetes TLS Secret names its files.

use std::process::ExitCode;

use clap::Args;

use super::error::Error;
use crate::server::certs;

#[derive(Args)]
pub struct CertsArgs {
    #[arg(long, value_name = "DIR")]
    pub out: std::path::PathBuf,
    /// DNS names of the serving certificate.
    #[arg(long, num_args = 1.., required = true, value_name = "NAME")]
    pub dns: Vec<String>,
    /// IP addresses of the serving certificate.
    #[arg(long, num_args = 1.., value_name = "ADDR")]
    pub ip: Vec<String>,
    /// Also write a client certificate with this common name, signed by the same CA, as
    /// DIR/client.crt and DIR/client.key: for the kube-apiserver to present to a webhook
    /// run with `serve --client-ca DIR/ca.crt`.
    #[arg(long, value_name = "NAME")]
    pub client: Option<String>,
    /// Make a new CA even if DIR/ca.crt and DIR/ca.key exist (the webhook configurations'
    /// caBundle must then be given the new DIR/ca.crt).
    #[arg(long)]
    pub new_ca: bool,
    /// Validity of the serving (and client) certificate: 90d, 2160h, 2y... (default: 365 days;
    /// never beyond the CA's end).
    #[arg(long, value_name = "DURATION", value_parser = crate::server::managed_tls::parse_validity)]
    pub validity: Option<std::time::Duration>,
    /// Validity of a new CA (default: 3650 days, 10 years); a CA kept from DIR keeps its own.
    #[arg(long, value_name = "DURATION", value_parser = crate::server::managed_tls::parse_validity)]
    pub ca_validity: Option<std::time::Duration>,
}

pub fn run(args: CertsArgs) -> Result<ExitCode, Error> {
    let ips = certs::parse_ips(&args.ip)?;
    let mut validity = certs::Validity::default();
    let duration = |d: std::time::Duration| time::Duration::seconds(d.as_secs().min(i64::MAX as u64) as i64);
    if let Some(d) = args.validity {
        validity.cert = duration(d);
    }
    if let Some(d) = args.ca_validity {
        validity.ca = duration(d);
    }
    let issued = certs::issue_into(&args.out, &args.dns, &ips, args.client.as_deref(), args.new_ca, validity)?;
    for f in &issued.files {
        println!("{}", f.display());
    }
    let ca = args.out.join(certs::CA_FILE);
    if issued.kept_ca {
        eprintln!("issued from the CA in {} (kept): a caBundle holding it trusts the new certificate", ca.display());
    } else {
        eprintln!("new CA: the webhook configurations' caBundle must hold {}", ca.display());
    }
    let day = |t: time::OffsetDateTime| t.date().to_string();
    eprintln!(
        "the certificate is valid until {} (UTC), the CA until {}: run this command again before then",
        day(issued.cert_not_after),
        day(issued.ca_not_after)
    );
    Ok(ExitCode::SUCCESS)
}
