//! Dataflows in a cluster: submit, stop and list flows the manager hands
//! to workers, and the worker's heartbeat. What a flow does is
//! `tablinum-flow`; this module only carries the calls.

use tablinum_proto::v1;

use crate::{AsyncClient, Result};

pub use v1::{FlowStatus, TaskLease, TaskReport, TaskStatus, WorkerHeartbeatResponse};

impl AsyncClient {
    /// Stores flow `name` (its checked `definition` with `tasks` tasks)
    /// and starts it on the cluster's workers. `false`: it was running
    /// already with this definition.
    pub async fn submit_flow(&self, name: &str, definition: &str, tasks: u32) -> Result<bool> {
        Ok(self
            .manager()
            .submit_flow(v1::SubmitFlowRequest {
                name: name.to_string(),
                definition: definition.to_string(),
                tasks,
            })
            .await?
            .into_inner()
            .started)
    }

    /// Stops flow `name`: its tasks commit what they hold and leave their
    /// workers.
    pub async fn stop_flow(&self, name: &str) -> Result<()> {
        self.manager()
            .stop_flow(v1::StopFlowRequest {
                name: name.to_string(),
            })
            .await?;
        Ok(())
    }

    /// Forgets stopped flow `name` (its outputs stay).
    pub async fn drop_flow(&self, name: &str) -> Result<()> {
        self.manager()
            .drop_flow(v1::DropFlowRequest {
                name: name.to_string(),
            })
            .await?;
        Ok(())
    }

    /// Every submitted flow with its tasks.
    pub async fn list_flows(&self) -> Result<Vec<FlowStatus>> {
        Ok(self
            .manager()
            .list_flows(v1::ListFlowsRequest {})
            .await?
            .into_inner()
            .flows)
    }

    /// A worker's heartbeat (cluster credential only): what it runs in,
    /// what it must run out.
    pub async fn worker_heartbeat(
        &self,
        worker_id: &str,
        tasks_max: u32,
        tasks: Vec<TaskReport>,
    ) -> Result<WorkerHeartbeatResponse> {
        Ok(self
            .manager()
            .worker_heartbeat(v1::WorkerHeartbeatRequest {
                worker_id: worker_id.to_string(),
                tasks_max,
                tasks,
            })
            .await?
            .into_inner())
    }
}
