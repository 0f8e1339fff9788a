// SIGINT and SIGTERM for every command: the first signal runs the cleanups the
// command registered (stop scanning and advertising, disconnect, close the trace),
// wakes its waits, and btctl exits 130 (SIGINT) or 143 (SIGTERM) once they are done;
// a second signal exits at once. Commands stay plain async code: a registered
// cleanup ends what they are waiting on (a closed host finishes every stream).

import BLE
import Dispatch
import Foundation
import HCI
import Synchronization

enum Interrupt {
    private struct State {
        var signal: Int32?
        var cleanups: [@Sendable () async -> Void] = []
        var finals: [@Sendable () async -> Void] = []
        var sleepers: [UInt64: CheckedContinuation<Void, Never>] = [:]
        var nextSleeper: UInt64 = 0
        var cleaning: Task<Void, Never>?
    }
    private static let state = Mutex(State())
    nonisolated(unsafe) private static var sources: [any DispatchSourceSignal] = []

    /// Takes over SIGINT and SIGTERM; call once, before the command runs.
    static func install() {
        for sig in [SIGINT, SIGTERM] {
            _ = Glibc.signal(sig, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: sig, queue: .global())
            source.setEventHandler { received(sig) }
            source.resume()
            sources.append(source)
        }
    }

    /// The signal received, if any.
    static var signal: Int32? { state.withLock { $0.signal } }
    static var requested: Bool { signal != nil }

    /// The exit status for the signal received: 128 + its number (130, 143).
    static var exitStatus: Int32? { signal.map { 128 + $0 } }

    /// Runs `cleanup` on the first signal (cleanups run in registration order). Registered
    /// after a signal already came, it runs at once.
    static func onSignal(_ cleanup: @escaping @Sendable () async -> Void) {
        let late: Bool = state.withLock { s in
            s.cleanups.append(cleanup)
            return s.signal != nil
        }
        if late { Task { await cleanup() } }
    }

    /// Runs `final` on a signal after every `onSignal` cleanup, in reverse registration
    /// order (a controller closes before the trace file it records to).
    static func atExit(_ final: @escaping @Sendable () async -> Void) {
        state.withLock { $0.finals.insert(final, at: 0) }
    }

    /// Sleeps for `duration`, or until a signal comes (then returns early, normally).
    static func sleep(for duration: Duration) async {
        await withTaskGroup(of: Void.self) { g in
            g.addTask { try? await Task.sleep(for: duration) }
            g.addTask { await waitForSignal() }
            await g.next()
            g.cancelAll()
        }
    }

    /// Returns when a signal comes (at once if one came), or when the task is cancelled.
    static func waitForSignal() async {
        let id: UInt64 = state.withLock { s in
            s.nextSleeper += 1
            return s.nextSleeper
        }
        await withTaskCancellationHandler {
            await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
                // Under the lock: a cancellation or signal either came before (resume now)
                // or finds the continuation registered.
                let now: Bool = state.withLock { s in
                    if s.signal != nil || Task.isCancelled { return true }
                    s.sleepers[id] = c
                    return false
                }
                if now { c.resume() }
            }
        } onCancel: {
            wake(id)
        }
    }

    private static func wake(_ id: UInt64) {
        state.withLock { $0.sleepers.removeValue(forKey: id) }?.resume()
    }

    /// Waits for the cleanups a signal started (bounded: a cleanup that hangs does not
    /// keep btctl alive past `limit`).
    static func finishCleanups(within limit: Duration = .seconds(5)) async {
        guard let task = state.withLock({ $0.cleaning }) else { return }
        await waitFor([task], within: limit)
    }

    private static func received(_ sig: Int32) {
        let first: (cleanups: [@Sendable () async -> Void], sleepers: [CheckedContinuation<Void, Never>])? = state.withLock { s in
            guard s.signal == nil else { return nil }
            s.signal = sig
            let sleepers = Array(s.sleepers.values)
            s.sleepers.removeAll()
            return (s.cleanups + s.finals, sleepers)
        }
        guard let first else {
            // A second signal: the person insists.
            FileHandle.standardError.write(Data("btctl: interrupted again, exiting without cleaning up\n".utf8))
            exit(128 + sig)
        }
        let task = Task {
            for c in first.cleanups { await c() }
        }
        state.withLock { $0.cleaning = task }
        for s in first.sleepers { s.resume() }
    }
}

/// Writes to standard output; a closed pipe (`btctl trace show big | head`) ends the
/// command quietly instead of killing it with SIGPIPE.
enum StandardOutput {
    static func write(_ text: String) throws {
        var text = text
        try text.withUTF8 { try write($0) }
    }

    static func write(_ bytes: [UInt8]) throws {
        try bytes.withUnsafeBufferPointer { try write($0) }
    }

    static func write(_ buf: UnsafeBufferPointer<UInt8>) throws {
        var off = 0
        while off < buf.count {
            let n = Glibc.write(1, buf.baseAddress! + off, buf.count - off)  // safe: off < count, so the buffer is non-empty
            if n < 0 {
                if errno == EINTR { continue }
                throw StandardOutputClosed()
            }
            off += n
        }
    }
}

/// Standard output is gone (EPIPE): the reader stopped; not an error to report.
struct StandardOutputClosed: Error {}

/// Waits until every one of `tasks` has ended, or `limit` has passed (it returns either
/// way; what is left goes on unless the caller cancels it). Not a task group: a child
/// awaiting a task's value cannot be cancelled, and the group would wait for it.
func waitFor(_ tasks: [Task<Void, Never>], within limit: Duration) async {
    let waiter = ResumeOnce()
    await withCheckedContinuation { k in
        waiter.set(k)
        let timer = Task { try? await Task.sleep(for: limit); waiter.resume() }
        Task {
            for t in tasks { await t.value }
            timer.cancel()
            waiter.resume()
        }
    }
}

extension Interrupt {
    /// Sleeps for `duration` (nil: no limit), or until a signal comes, or until `host`'s
    /// transport ends (the controller went away: a Rootcanal or btproxy that stopped, a
    /// tty unplugged), told by the host's state as it changes. Returns the transport's
    /// reason in that last case, nil in the others.
    static func sleep(for duration: Duration?, orUntilTheTransportOf host: BluetoothHost) async -> String? {
        let states = host.states(), lost = FirstReason()
        await withTaskGroup(of: Void.self) { g in
            g.addTask {
                for await s in states {
                    if case let .transportClosed(why) = s {
                        lost.set(why)
                        return
                    }
                }
            }
            g.addTask {
                if let duration { await sleep(for: duration) } else { await waitForSignal() }
            }
            await g.next()
            g.cancelAll()
        }
        return lost.reason
    }
}

/// A command ended because its controller went away: said after its summary, exit
/// status 1.
struct ControllerWentAway: Error, CustomStringConvertible {
    let why: String
    var description: String { "the controller went away: \(why)" }
}
