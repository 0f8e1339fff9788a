// Packets handed to another event loop in one batch per loop turn, in order: the
// virtual controller's outbox (what it sends its host) and, for a host on a loop of
// its own, its inbox (what that host sends it).

import HCI
import NIOCore
import Synchronization

/// Packets on their way to a host's event loop: collected under a lock, handed over in
/// one batch per loop turn, in order.
final class LoopOutbox: Sendable {
    /// Where batches go, set once by `attach`. A class: it leaves the lock as one
    /// reference (a closure returned from `withLock`, a generic function, is
    /// re-wrapped in a new allocation each time).
    private final class Target: Sendable {
        let loop: any EventLoop
        let receive: @Sendable (TransportInput) -> Void
        /// `flush` as the loop's job, made once.
        let job: @Sendable () -> Void
        init(loop: any EventLoop, receive: @escaping @Sendable (TransportInput) -> Void, job: @escaping @Sendable () -> Void) {
            self.loop = loop
            self.receive = receive
            self.job = job
        }
    }
    private struct State {
        var target: Target?
        var pending: [HCIPacket] = []
        /// The storage of the batch handed over last, emptied, for the next one.
        var spare: [HCIPacket] = []
        var scheduled = false
    }
    private let state = Mutex(State())

    func attach(loop: any EventLoop, _ receive: @escaping @Sendable (TransportInput) -> Void) {
        // The job holds this outbox strongly (a weak reference would give it a side
        // table, and every retain of it the slow path): `end()` lets go of the target.
        let target = Target(loop: loop, receive: receive, job: { self.flush() })
        state.withLock { $0.target = target }
    }

    /// Queues `p` for the loop; false when no loop is attached (use the stream).
    /// Number Of Completed Packets for one handle is counted into the event still
    /// queued at the end for that handle, if there is one: a controller reports
    /// completions at the rate it chooses (Vol 4, Part E, §4.3), and the host takes
    /// several buffers back in one event.
    func put(_ p: HCIPacket) -> Bool {
        let (attached, schedule) = state.withLock { s -> (Bool, Target?) in
            guard let target = s.target else { return (false, nil) }
            if !Self.addCompletions(p, toLastOf: &s.pending) { s.pending.append(p) }
            if s.scheduled { return (true, nil) }
            s.scheduled = true
            return (true, target)
        }
        if let schedule { schedule.loop.execute(schedule.job) }
        return attached
    }

    /// Counts `later` into the last of `pending` when both are Number Of Completed
    /// Packets for the same single handle and the sum fits; false when it cannot.
    /// The last event's bytes are changed in place (no new array).
    private static func addCompletions(_ later: HCIPacket, toLastOf pending: inout [HCIPacket]) -> Bool {
        guard let i = pending.indices.last, case let .event(code, a) = pending[i], case let .event(laterCode, b) = later,
              code == .numberOfCompletedPackets, laterCode == code,
              a.count == 5, b.count == 5, a[0] == 1, b[0] == 1, a[1] == b[1], a[2] == b[2] else { return false }
        let sum = (Int(a[3]) | Int(a[4]) << 8) + (Int(b[3]) | Int(b[4]) << 8)
        guard sum <= Int(UInt16.max) else { return false }
        var parameters = consume a
        pending[i] = .sco([])  // lets go of the array's other reference, so the change below needs no copy
        parameters[3] = UInt8(sum & 0xFF)
        parameters[4] = UInt8(sum >> 8)
        pending[i] = .event(code: code, parameters: parameters)
        return true
    }

    private func flush() {
        let (batch, target) = state.withLock { s -> ([HCIPacket], Target?) in
            s.scheduled = false
            let batch = s.pending
            s.pending = s.spare
            s.spare = []
            return (batch, s.target)
        }
        guard !batch.isEmpty, let target else { return }
        target.receive(.packets(batch))
        // The host is done with the batch (it handles packets as they come): its
        // storage serves the next one.
        var storage = consume batch
        storage.removeAll(keepingCapacity: true)
        state.withLock { if $0.spare.capacity < storage.capacity { $0.spare = storage } }
    }

    /// The controller closed: after what is queued, the host hears the end. False when no loop is attached.
    func end() -> Bool {
        guard let target = state.withLock({ $0.target }) else { return false }
        target.loop.execute {
            self.flush()
            self.state.withLock { $0.target = nil }
            target.receive(.ended(nil))
        }
        return true
    }
}

