//! `stream: true`: server-sent events in OpenAI's chunk format, ending with `data: [DONE]`.
//! The first chunk (role, `unmask.run_id`) goes out when decoding starts; text follows as its
//! stable prefix grows; with `stream_steps` every step's changes ride along in `unmask`.
//! Dropping the stream (the client disconnected) closes the job's channel, which the worker
//! notices at its next step and cancels the run.

use std::convert::Infallible;

use axum::response::sse::{Event, KeepAlive, Sse};
use futures_core::Stream;
use serde_json::{json, Value};
use tokio::sync::mpsc::UnboundedReceiver;

use super::error::ApiError;
use super::reply::Reply;
use super::state::AppState;
use super::text::TextStream;
use super::worker::JobEvent;

fn data(v: &Value) -> Result<Event, Infallible> {
    Ok(Event::default().data(v.to_string()))
}

fn done() -> Result<Event, Infallible> {
    Ok(Event::default().data("[DONE]"))
}

/// An error inside a stream that has started: OpenAI's clients raise it.
fn error_event(e: &ApiError) -> Result<Event, Infallible> {
    data(&e.body())
}

/// The event stream of one job.
pub fn events(
    app: AppState,
    mut reply: Reply,
    mut rx: UnboundedReceiver<JobEvent>,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let stream = async_stream::stream! {
        let mut text = TextStream::new(
            reply.model.parts.clone(),
            reply.prompt_len,
            reply.settings.gen_length,
            reply.stop_ids.clone(),
            reply.stop_strings.clone(),
        );
        loop {
            match rx.recv().await {
                Some(JobEvent::Started { run_id, queued_s }) => {
                    reply.started(&app, run_id, queued_s);
                    yield data(&reply.chunk(true, None, None, Some(reply.start_info())));
                }
                Some(JobEvent::Frame(f)) => {
                    let delta = text.apply(&f);
                    let step = reply.stream_steps.then(|| json!({ "step": reply.step(&f) }));
                    if delta.is_some() || step.is_some() {
                        yield data(&reply.chunk(false, delta.as_deref(), None, step));
                    }
                }
                Some(JobEvent::Finished(o)) => {
                    let (answer, finish) = reply.answer(&o);
                    if let Some(rest) = text.finish(&answer) {
                        yield data(&reply.chunk(false, Some(&rest), None, None));
                    }
                    yield data(&reply.chunk(false, None, Some(finish), Some(reply.end_info(&o))));
                    if reply.include_usage {
                        yield data(&reply.usage_chunk(&o));
                    }
                    yield done();
                    break;
                }
                Some(JobEvent::Failed(e)) => {
                    yield error_event(&e);
                    yield done();
                    break;
                }
                None => {
                    yield error_event(&ApiError::internal("the model's worker stopped"));
                    yield done();
                    break;
                }
            }
        }
    };
    Sse::new(stream).keep_alive(KeepAlive::default())
}
