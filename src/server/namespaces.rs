//! Reading a namespace the view does not know yet, before a review is judged: a namespace created
//! in the same apply (or sync) as its workloads reaches the webhook before its watch event reaches
//! the view, and its labels decide which overrides apply. The rules stay pure: the shell reads
//! here, then judges against the view with the labels read ([`WithNamespace`]); what it cannot
//! read is judged at the strictest action an override could give ([`UnknownNamespace::Strictest`](crate::core::decide::UnknownNamespace)).

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use kube::Api;
use kube::core::admission::Operation;

use super::review::Request;
use crate::core::config::Config;
use crate::core::view::{View, WithNamespace};

type Labels = BTreeMap<String, String>;

/// Reads a namespace's labels from the cluster.
pub trait ReadNamespace: Send + Sync {
    /// The labels of namespace `name` (`Ok(None)`: there is no such namespace), waiting at most
    /// `within`. Called on a review's thread, never an async worker: it blocks until answered.
    fn labels(&self, name: &str, within: Duration) -> Result<Option<Labels>, String>;
}

/// [`ReadNamespace`] through the server's kube client: one GET.
pub struct ApiNamespaces {
    client: kube::Client,
    runtime: tokio::runtime::Handle,
}

impl ApiNamespaces {
    /// Made on the server's runtime, which drives the GET (a review's thread has none of its own).
    pub fn new(client: kube::Client) -> ApiNamespaces {
        ApiNamespaces { client, runtime: tokio::runtime::Handle::current() }
    }
}

impl ReadNamespace for ApiNamespaces {
    fn labels(&self, name: &str, within: Duration) -> Result<Option<Labels>, String> {
        let api: Api<Namespace> = Api::all(self.client.clone());
        match self.runtime.block_on(tokio::time::timeout(within, api.get_opt(name))) {
            Ok(Ok(namespace)) => Ok(namespace.map(|n| n.metadata.labels.unwrap_or_default())),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err(format!("no answer within {}", humantime::format_duration(within))),
        }
    }
}

/// The labels of the request's namespace when the configuration decides by them (overrides, an
/// exception's namespaceSelector) and the view does not know the namespace: read from the cluster.
/// `None` when there is nothing to read, or it could not be read (logged: the review then applies
/// the overrides at their strictest and says so in a warning). `reader`: the server's (none without
/// a live cluster); `deadline`: the admission's.
pub fn read_for(
    reader: Option<&dyn ReadNamespace>,
    deadline: Duration,
    config: &Config,
    view: &dyn View,
    request: &Request,
) -> Option<(String, Labels)> {
    let header = &request.header;
    let namespace = header.namespace.as_deref().filter(|n| !n.is_empty())?;
    if !matches!(header.operation, Operation::Create | Operation::Update)
        || !config.reads_namespace_labels()
        || config.namespace_exempt(namespace)
        || view.namespace_labels(namespace).is_some()
    {
        return None;
    }
    let Some(reader) = reader else {
        tracing::warn!(
            namespace,
            "namespace not in the view and no cluster to read it from: the overrides apply at their strictest"
        );
        return None;
    };
    // Half the deadline: what is left answers the review.
    let within = deadline / 2;
    match reader.labels(namespace, within) {
        Ok(Some(labels)) => {
            tracing::debug!(namespace, "namespace not in the view yet: its labels read from the apiserver");
            Some((namespace.to_string(), labels))
        }
        Ok(None) => {
            tracing::warn!(namespace, "namespace not found: the overrides apply at their strictest");
            None
        }
        Err(error) => {
            tracing::warn!(
                namespace,
                %error,
                "cannot read the namespace's labels: the overrides apply at their strictest"
            );
            None
        }
    }
}

/// `view` with the namespace read, if one was.
pub fn with_read<'a>(view: &'a dyn View, read: Option<(String, Labels)>) -> Option<WithNamespace<'a>> {
    read.map(|(namespace, labels)| WithNamespace { base: view, namespace, labels })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// The GET runs from a review's thread (the blocking pool), driven by the server's runtime:
    /// against a one-shot apiserver answering `GET /api/v1/namespaces/fresh`.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_namespace_is_read_from_a_reviews_thread() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let apiserver = tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            let mut request = vec![0; 4096];
            let n = stream.read(&mut request).await.unwrap();
            let body = r#"{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"fresh","labels":{"tier":"prod"}}}"#;
            let answer = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            stream.write_all(answer.as_bytes()).await.unwrap();
            String::from_utf8_lossy(&request[..n]).into_owned()
        });
        let config = kube::Config::new(format!("http://{addr}").parse().unwrap());
        let reader = ApiNamespaces::new(kube::Client::try_from(config).unwrap());
        let labels = tokio::task::spawn_blocking(move || reader.labels("fresh", Duration::from_secs(5))).await.unwrap();
        assert_eq!(labels, Ok(Some([("tier".to_string(), "prod".to_string())].into())));
        let request = apiserver.await.unwrap();
        assert!(request.starts_with("GET /api/v1/namespaces/fresh"), "{request}");
    }
}
