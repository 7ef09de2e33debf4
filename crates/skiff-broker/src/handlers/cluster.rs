//! DescribeCluster v0-2, as Kafka's `AuthHelper.computeDescribeClusterResponse` answers on a
//! broker listener: this node is the only broker and (as a KRaft broker reports a live broker) the
//! controller ID. Only the BROKER endpoint type (1) is served: CONTROLLER (2) is
//! MISMATCHED_ENDPOINT_TYPE and any other type UNSUPPORTED_ENDPOINT_TYPE (both INVALID_REQUEST
//! at v0, which has no endpoint type field). As in Kafka, no ACL is needed; the cluster's
//! authorized operations are 0 to a principal that may not DESCRIBE it.

use skiff_protocol::generated::DescribeClusterRequest;
use skiff_protocol::generated::describe_cluster_response::{
    DescribeClusterBroker, DescribeClusterResponse,
};
use skiff_protocol::{ByteString, Response, error_codes};

use super::RequestContext;

pub const ENDPOINT_BROKER: i8 = 1;
pub const ENDPOINT_CONTROLLER: i8 = 2;
pub const MISMATCHED_ENDPOINT_TYPE: i16 = 114;
pub const UNSUPPORTED_ENDPOINT_TYPE: i16 = 115;

pub fn handle(ctx: &RequestContext, request: DescribeClusterRequest) -> Response {
    let broker = &ctx.broker;
    let error = |v1_code: i16, message: String| {
        Response::DescribeCluster(DescribeClusterResponse {
            error_code: if ctx.version == 0 {
                error_codes::INVALID_REQUEST
            } else {
                v1_code
            },
            error_message: Some(ByteString::from(message)),
            ..Default::default()
        })
    };
    match request.endpoint_type {
        ENDPOINT_BROKER => {}
        ENDPOINT_CONTROLLER => {
            return error(
                MISMATCHED_ENDPOINT_TYPE,
                "The request was sent to an endpoint of type BROKER, but we wanted an endpoint of \
                 type CONTROLLER"
                    .into(),
            );
        }
        other => {
            return error(
                UNSUPPORTED_ENDPOINT_TYPE,
                format!("Unsupported endpoint type {other}"),
            );
        }
    }
    Response::DescribeCluster(DescribeClusterResponse {
        error_code: error_codes::NONE,
        error_message: None,
        endpoint_type: ENDPOINT_BROKER,
        cluster_id: ByteString::from(broker.cluster_id.clone()),
        controller_id: broker.controller_id(),
        brokers: broker
            .nodes_for(ctx.listener)
            .into_iter()
            .map(|n| DescribeClusterBroker {
                broker_id: n.node_id,
                host: ByteString::from(n.host),
                port: n.port,
                rack: n.rack.map(ByteString::from),
                is_fenced: false,
                ..Default::default()
            })
            .collect(),
        cluster_authorized_operations: if request.include_cluster_authorized_operations {
            ctx.cluster_authorized_operations()
        } else {
            i32::MIN
        },
        ..Default::default()
    })
}
