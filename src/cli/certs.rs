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
}

pub fn run(args: CertsArgs) -> Result<ExitCode, Error> {
    let ips = certs::parse_ips(&args.ip)?;
    let issued = certs::issue_into(&args.out, &args.dns, &ips, args.client.as_deref(), args.new_ca)?;
    for f in &issued.files {
        println!("{}", f.display());
    }
    let ca = args.out.join(certs::CA_FILE);
    if issued.kept_ca {
        eprintln!("issued from the CA in {} (kept): a caBundle holding it trusts the new certificate", ca.display());
    } else {
        eprintln!("new CA: the webhook configurations' caBundle must hold {}", ca.display());
    }
    Ok(ExitCode::SUCCESS)
}
