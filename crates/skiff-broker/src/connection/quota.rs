//! Client quotas at the connection (KIP-219): what each request and response counts against
//! the quotas of [`crate::quotas`], the throttle time a response carries, and how long the
//! connection is muted or an old client's response delayed.

use std::sync::Arc;

use skiff_protocol::{ApiKey, Response};
use skiff_quota::entity::Key;

use crate::clock::now_ms;
use crate::handlers::Reply;
use crate::quotas::Requester;
use crate::state::Broker;

/// Whether a client of `api` at `version` throttles itself on a response's throttle time (KIP-219):
/// the broker then answers at once and reads nothing more from it for that long; older clients
/// get their response that much later instead.
pub fn client_throttles(api: ApiKey, version: i16) -> bool {
    match api {
        ApiKey::Produce => version >= 6,
        ApiKey::Fetch => version >= 8,
        _ => true,
    }
}

/// Requests no quota counts (Kafka exempts these from the request quota).
fn exempt(api: ApiKey) -> bool {
    matches!(
        api,
        ApiKey::ApiVersions | ApiKey::SaslHandshake | ApiKey::SaslAuthenticate
    )
}

/// The record bytes of a Fetch response (what `consumer_byte_rate` counts).
fn fetched_bytes(response: &Response) -> usize {
    match response {
        Response::Fetch(r) => r
            .responses
            .iter()
            .flat_map(|t| &t.partitions)
            .map(|p| p.records.as_ref().map_or(0, |b| b.len()))
            .sum(),
        _ => 0,
    }
}

/// A Fetch response without its records (a throttled fetch, as Kafka's throttled response).
fn without_records(response: &mut Response) {
    if let Response::Fetch(r) = response {
        for p in r.responses.iter_mut().flat_map(|t| t.partitions.iter_mut()) {
            p.records = Some(bytes::Bytes::new());
            p.aborted_transactions = p.aborted_transactions.take().map(|_| Vec::new());
        }
    }
}

/// The response with `consumer_byte_rate` measured (Fetch) and the throttle time set; and how
/// long an old client's response must wait.
fn finish(
    broker: &Broker,
    who: &Requester<'_>,
    api: ApiKey,
    version: i16,
    mut throttle: i64,
    mut response: Response,
) -> (Response, i64) {
    if api == ApiKey::Fetch {
        let bytes = fetched_bytes(&response);
        if bytes > 0 {
            let t = broker
                .quotas
                .record(Key::ConsumerByteRate, who, bytes as f64, now_ms());
            if t > 0 {
                without_records(&mut response);
            }
            throttle = throttle.max(t);
        }
    }
    if throttle <= 0 {
        return (response, 0);
    }
    let ms = i32::try_from(throttle).unwrap_or(i32::MAX);
    response.set_throttle_time_ms(response.throttle_time_ms().max(ms));
    let delay = if client_throttles(api, version) {
        0
    } else {
        throttle
    };
    (response, delay)
}

async fn delayed(response: Response, delay_ms: i64) -> Response {
    if delay_ms > 0 {
        tokio::time::sleep(std::time::Duration::from_millis(
            u64::try_from(delay_ms).unwrap_or(0),
        ))
        .await;
    }
    response
}

/// Applies the quotas to a request's reply: its size against `producer_byte_rate` (Produce),
/// the handler's time against `request_percentage`, the response's records against
/// `consumer_byte_rate` (Fetch). Returns the reply (its throttle time set, an old client's
/// delayed) and how long to mute the connection from now (a Fetch's own throttle mutes it when
/// its response is written).
pub fn enforce(
    broker: &Arc<Broker>,
    who: &Requester<'_>,
    api: ApiKey,
    version: i16,
    request_bytes: usize,
    handler_time: std::time::Duration,
    reply: Reply,
) -> (Reply, i64) {
    if exempt(api) {
        return (reply, 0);
    }
    let now = now_ms();
    let mut throttle = 0;
    if api == ApiKey::Produce {
        throttle = broker
            .quotas
            .record(Key::ProducerByteRate, who, request_bytes as f64, now);
    }
    let percent = handler_time.as_nanos() as f64 * 100.0 / 1e9;
    throttle = throttle.max(
        broker
            .quotas
            .record(Key::RequestPercentage, who, percent, now),
    );
    // Known before the response: the connection is muted from now on, so that requests the
    // client pipelined are not served inside the throttle time (Kafka reads one request of a
    // connection at a time; Skiff reads ahead).
    let mute = if client_throttles(api, version) || matches!(reply, Reply::Nothing) {
        throttle
    } else {
        0
    };
    match reply {
        Reply::Nothing => (Reply::Nothing, mute),
        Reply::Now(response) => match finish(broker, who, api, version, throttle, response) {
            (response, 0) => (Reply::Now(response), mute),
            (response, delay) => (Reply::Later(Box::pin(delayed(response, delay))), 0),
        },
        Reply::Later(future) => {
            let broker = Arc::clone(broker);
            let user = who.user.to_string();
            let client_id = who.client_id.to_string();
            let instance = who.instance.clone();
            (
                Reply::Later(Box::pin(async move {
                    let who = Requester {
                        user: &user,
                        client_id: &client_id,
                        instance,
                    };
                    let response = future.await;
                    let (response, delay) = finish(&broker, &who, api, version, throttle, response);
                    delayed(response, delay).await
                })),
                mute,
            )
        }
    }
}
