// `ChannelTransport.inbound`'s buffer: the packets the channel read that the consumer
// has not taken yet, bounded by back-pressure instead of by dropping. The channel
// stops reading once `highWater` packets wait (a read already under way still
// delivers what it got: at most one turn of the loop's reads more) and reads again
// when the consumer has taken them down to `lowWater`. Bytes the channel does not
// read stay in the kernel's socket buffer, and the controller's own flow control
// holds the rest, as on the host's path (`deliver(on:_:)`).

import HCI
import NIOCore
import Synchronization

final class PulledPackets: Sendable {
    /// Reading pauses when this many packets wait for the consumer.
    static let highWater = 256
    /// Reading resumes when the consumer has taken them down to this many.
    static let lowWater = 64

    private typealias Outcome = Result<HCIPacket?, any Error>

    private struct State {
        var packets = CircularBuffer<HCIPacket>()
        /// How the link ended (`TransportInput.ended`), handed over after the packets.
        var ending: (any Error)??
        /// The consumer, waiting for a packet or the end (the buffer is empty then, so
        /// reading is not paused).
        var waiter: CheckedContinuation<Outcome, Never>?
        var paused = false
        /// The most packets that ever waited at once.
        var most = 0
    }

    private let state = Mutex(State())

    /// The most packets that ever waited for the consumer at once.
    var mostWaiting: Int { state.withLock { $0.most } }
    /// Whether reading is paused for the consumer.
    var isPaused: Bool { state.withLock { $0.paused } }

    /// What the channel delivered (on its loop). True when reading should pause now.
    func put(_ input: TransportInput) -> Bool {
        let (waiter, outcome, pause) = state.withLock { s -> (CheckedContinuation<Outcome, Never>?, Outcome?, Bool) in
            switch input {
            case let .packets(ps):
                s.packets.append(contentsOf: ps)
                s.most = Swift.max(s.most, s.packets.count)
            case let .ended(error):
                guard s.ending == nil else { return (nil, nil, false) }
                s.ending = .some(error)
            }
            var handed: (CheckedContinuation<Outcome, Never>, Outcome)?
            if let waiter = s.waiter, let (outcome, _) = Self.take(&s) {
                s.waiter = nil
                handed = (waiter, outcome)
            }
            let pause = !s.paused && s.packets.count >= Self.highWater
            if pause { s.paused = true }
            return (handed?.0, handed?.1, pause)
        }
        if let waiter, let outcome { waiter.resume(returning: outcome) }
        return pause
    }

    /// The next packet; nil after a clean end (`close()`); throws how the link failed,
    /// or `CancellationError` when the consumer's task is cancelled while it waits.
    /// `resumeReading` is called when the consumer has taken the packets down to
    /// `lowWater` while reading was paused. One consumer at a time.
    func next(resumeReading: () -> Void) async throws -> HCIPacket? {
        if let (outcome, resume) = state.withLock({ Self.take(&$0) }) {
            if resume { resumeReading() }
            return try outcome.get()
        }
        // The buffer was empty, so reading is not paused: nothing to resume after a wait.
        let outcome = await withTaskCancellationHandler {
            await withCheckedContinuation { (c: CheckedContinuation<Outcome, Never>) in
                let now = state.withLock { s -> Outcome? in
                    if let (outcome, _) = Self.take(&s) { return outcome }
                    if Task.isCancelled { return .failure(CancellationError()) }
                    if s.waiter != nil { return .failure(TransportError.unavailable("inbound is read by another task already")) }
                    s.waiter = c
                    return nil
                }
                if let now { c.resume(returning: now) }
            }
        } onCancel: {
            state.withLock { s in defer { s.waiter = nil }; return s.waiter }?.resume(returning: .failure(CancellationError()))
        }
        return try outcome.get()
    }

    /// The next packet or the end, if there is one (under the lock), and whether reading
    /// resumes with it.
    private static func take(_ s: inout State) -> (Outcome, Bool)? {
        if let p = s.packets.popFirst() {
            guard s.paused, s.packets.count <= lowWater else { return (.success(p), false) }
            s.paused = false
            return (.success(p), true)
        }
        guard let ending = s.ending else { return nil }
        return (ending.map { .failure($0) } ?? .success(nil), false)
    }
}
