//! The heartbeat loop every member role runs (tablet servers, scan
//! servers): a manager client presenting the cluster credential, one beat
//! every interval until stopped, the first failure of a run of failures
//! logged (not every one). What a beat sends and does with the answer is
//! the role's; this module never interprets an answer.

use std::future::Future;
use std::time::Duration;

use tablinum_auth::ClusterSecret;
use tablinum_proto::v1::manager_client::ManagerClient;
use tonic::Status;

/// The manager client a beat is given.
pub(crate) type Manager = ManagerClient<tablinum_client::Transport>;

/// Calls `beat` every `period` until `stop` changes. `role` names the
/// caller in logs.
pub(crate) async fn run<F, Fut>(
    role: &'static str,
    manager: &str,
    tls: Option<&tablinum_client::ClientTls>,
    secret: &ClusterSecret,
    period: Duration,
    mut stop: tokio::sync::watch::Receiver<bool>,
    mut beat: F,
) where
    F: FnMut(Manager) -> Fut,
    Fut: Future<Output = Result<(), Status>>,
{
    let ep = match tablinum_client::endpoint(manager, tls) {
        Ok(e) => e,
        Err(e) => {
            tracing::error!(role, manager = %manager, error = %e, "bad manager address; not heartbeating");
            return;
        }
    };
    let mgr = ManagerClient::new(tablinum_auth::Caller::new(
        ep.connect_lazy(),
        tablinum_auth::Bearer::new(
            Some(&secret.credential()),
            tablinum_auth::proof::MANAGER_AUDIENCE,
        ),
    ));
    let mut failing = false;
    loop {
        match beat(mgr.clone()).await {
            Ok(()) => failing = false,
            Err(e) if !failing => {
                failing = true;
                tracing::warn!(role, manager = %manager, error = %e.message(), "heartbeat failed");
            }
            Err(_) => {}
        }
        tokio::select! {
            _ = tokio::time::sleep(period) => {}
            _ = stop.changed() => return,
        }
    }
}
