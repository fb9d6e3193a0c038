#pragma once

#include <string_view>

namespace tfd {

// Tells the service manager (systemd, through $NOTIFY_SOCKET; a Type=notify unit) how this task is
// doing. No-ops when tfd runs outside systemd or was built without libsystemd. Any thread.
void NotifyReady(std::string_view status);  // READY=1: listening (ps) or connected and initialised (worker)
void NotifyStatus(std::string_view status);  // STATUS=...: shown by systemctl status
void NotifyStopping();                      // STOPPING=1: shutting down after a signal

// True when stderr is the journal (systemd sets JOURNAL_STREAM to stderr's device:inode).
bool StderrIsJournal();

}  // namespace tfd
