//! `ha-guard certs`: a CA and a serving certificate signed by it, as a Kubernetes TLS Secret names
//! its files.

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
}

pub fn run(args: CertsArgs) -> Result<ExitCode, Error> {
    let ips = certs::parse_ips(&args.ip)?;
    let bundle = certs::generate_with_client(&args.dns, &ips, args.client.as_deref())?;
    for f in certs::write(&args.out, &bundle)? {
        println!("{}", f.display());
    }
    Ok(ExitCode::SUCCESS)
}
