//! Where streamed events go: a Tauri `Channel` in the app, a collecting sink in tests.

use std::sync::{Arc, Mutex};

use serde::Serialize;

/// Receives the events of one streaming command. `send` is called from worker threads.
pub trait EventSink<T>: Send + Sync {
    /// Delivers one event; an error means the receiver is gone (the window closed).
    fn send(&self, event: T) -> Result<(), String>;
}

impl<T> EventSink<T> for tauri::ipc::Channel<T>
where
    T: tauri::ipc::IpcResponse + Clone + Send + Sync + 'static,
{
    fn send(&self, event: T) -> Result<(), String> {
        tauri::ipc::Channel::send(self, event).map_err(|e| e.to_string())
    }
}

/// Keeps every event (tests, fixture recording, headless runs).
#[derive(Debug)]
pub struct CollectSink<T>(Arc<Mutex<Vec<T>>>);

impl<T> Clone for CollectSink<T> {
    fn clone(&self) -> Self {
        CollectSink(self.0.clone())
    }
}

impl<T> Default for CollectSink<T> {
    fn default() -> Self {
        CollectSink(Arc::new(Mutex::new(Vec::new())))
    }
}

impl<T: Clone> CollectSink<T> {
    /// A copy of the events so far.
    pub fn events(&self) -> Vec<T> {
        self.0.lock().map(|v| v.clone()).unwrap_or_default()
    }
}

impl<T: Serialize + Send + 'static> EventSink<T> for CollectSink<T> {
    fn send(&self, event: T) -> Result<(), String> {
        self.0.lock().map_err(|_| "sink poisoned".to_owned())?.push(event);
        Ok(())
    }
}

/// Drops every event (re-runs from the compare view have no live view).
#[derive(Debug, Default, Clone, Copy)]
pub struct NullSink;

impl<T> EventSink<T> for NullSink {
    fn send(&self, _event: T) -> Result<(), String> {
        Ok(())
    }
}
