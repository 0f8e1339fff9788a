// An in-memory transport for tests: the test plays the controller. It injects
// controller packets, waits for and checks what the host sends, and can run a
// whole conversation (hand-written or taken from a btsnoop capture: sent frames
// are expected from the host, received frames are injected).

import HCI
import Snoop
import Synchronization

public struct ScriptMismatch: Error, CustomStringConvertible, Equatable {
    public var step: Int
    public var expected: HCIPacket
    public var actual: HCIPacket?
    public var description: String {
        "step \(step): expected host to send \(expected.h4Bytes.hexString), "
            + (actual.map { "got \($0.h4Bytes.hexString)" } ?? "got nothing before the timeout")
    }
}

public final class ScriptedTransport: HCITransport {
    /// What the test injects, until the host takes it. Unbounded on purpose: it never
    /// holds more than the test itself wrote.
    public let inbound: AsyncThrowingStream<HCIPacket, any Error>
    private let continuation: AsyncThrowingStream<HCIPacket, any Error>.Continuation
    private let state = Mutex(State())

    struct State {
        var sent: [HCIPacket] = []
        var consumed = 0
        var waiters: [CheckedContinuation<HCIPacket?, Never>] = []
        var closed = false
        var responder: (@Sendable (HCIPacket) -> [HCIPacket])?
    }

    public init() {
        (inbound, continuation) = AsyncThrowingStream<HCIPacket, any Error>.makeStream(bufferingPolicy: .unbounded)
    }

    // MARK: HCITransport

    public func send(_ packet: HCIPacket) async throws {
        let (waiter, responder, closed) = state.withLock { s -> (CheckedContinuation<HCIPacket?, Never>?, (@Sendable (HCIPacket) -> [HCIPacket])?, Bool) in
            if s.closed { return (nil, nil, true) }
            s.sent.append(packet)
            if s.responder == nil, !s.waiters.isEmpty {
                s.consumed += 1
                return (s.waiters.removeFirst(), nil, false)
            }
            return (nil, s.responder, false)
        }
        if closed { throw TransportError.closed }
        waiter?.resume(returning: packet)
        if let responder { for p in responder(packet) { inject(p) } }
    }

    public func close() async { finish(nil) }

    // MARK: Playing the controller

    /// Delivers a controller-to-host packet.
    public func inject(_ packet: HCIPacket) { continuation.yield(packet) }

    public func inject(_ event: HCIEvent) { inject(event.packet) }

    /// Fails the transport as a broken link would.
    public func fail(_ error: TransportError) { finish(error) }

    private func finish(_ error: TransportError?) {
        let waiters = state.withLock { s -> [CheckedContinuation<HCIPacket?, Never>] in
            s.closed = true
            defer { s.waiters.removeAll() }
            return s.waiters
        }
        for w in waiters { w.resume(returning: nil) }
        if let error { continuation.finish(throwing: error) } else { continuation.finish() }
    }

    /// Every packet the host has sent so far.
    public var sent: [HCIPacket] { state.withLock { $0.sent } }

    /// Answers every host packet automatically (e.g. a Command Complete per command).
    /// While a responder is set, `nextSent` does not see packets.
    public func respond(with responder: (@Sendable (HCIPacket) -> [HCIPacket])?) {
        state.withLock { $0.responder = responder }
    }

    /// The next packet the host sends that this method has not returned yet; nil if
    /// none arrives within `timeout` (wall clock: it only bounds a broken test) or the
    /// transport closes.
    public func nextSent(timeout: Duration = .seconds(5)) async -> HCIPacket? {
        let ready = state.withLock { s -> HCIPacket? in
            guard s.consumed < s.sent.count else { return nil }
            s.consumed += 1
            return s.sent[s.consumed - 1]
        }
        if let ready { return ready }
        return await withTaskGroup(of: HCIPacket?.self) { group in
            group.addTask {
                await withCheckedContinuation { (c: CheckedContinuation<HCIPacket?, Never>) in
                    let immediate = self.state.withLock { s -> HCIPacket?? in
                        if s.closed { return .some(nil) }
                        if s.consumed < s.sent.count {
                            s.consumed += 1
                            return .some(s.sent[s.consumed - 1])
                        }
                        s.waiters.append(c)
                        return .none
                    }
                    if let immediate { c.resume(returning: immediate) }
                }
            }
            group.addTask {
                try? await Task.sleep(for: timeout)
                return nil
            }
            let first = await group.next() ?? nil
            if first == nil {
                // Timed out: release the waiter so the other child finishes.
                let w = self.state.withLock { s -> [CheckedContinuation<HCIPacket?, Never>] in
                    defer { s.waiters.removeAll() }
                    return s.waiters
                }
                for c in w { c.resume(returning: nil) }
            }
            group.cancelAll()
            return first
        }
    }

    /// Waits for the host's next packet and checks it equals `packet` byte for byte.
    public func expect(_ packet: HCIPacket, step: Int = 0, timeout: Duration = .seconds(5)) async throws {
        let got = await nextSent(timeout: timeout)
        guard got == packet else { throw ScriptMismatch(step: step, expected: packet, actual: got) }
    }

    /// Expects a command (any parameters) and answers it with Command Complete carrying
    /// `returning` (success status prepended).
    public func expectCommand<C: HCICommand>(_ command: C, returning r: C.ReturnParameters, timeout: Duration = .seconds(5)) async throws {
        try await expect(command.packet, timeout: timeout)
        inject(HCIEvent.commandComplete(CommandComplete(commandOpcode: C.opcode, returning: r)))
    }

    // MARK: Conversations

    public enum Step: Sendable, Equatable {
        /// The host must send exactly this.
        case expect(HCIPacket)
        /// The controller sends this.
        case inject(HCIPacket)
    }

    /// The conversation in a trace: host-to-controller frames become `.expect`,
    /// controller-to-host frames `.inject`. Frames without a direction or packet are skipped.
    public static func script(from trace: Trace) -> [Step] {
        trace.records.compactMap { r in
            guard let p = r.packet else { return nil }
            switch r.direction {
            case .hostToController: return .expect(p)
            case .controllerToHost: return .inject(p)
            case .unknown: return nil
            }
        }
    }

    /// Plays a conversation; throws `ScriptMismatch` at the first difference.
    public func play(_ steps: [Step], timeout: Duration = .seconds(5)) async throws {
        for (i, step) in steps.enumerated() {
            switch step {
            case let .expect(p): try await expect(p, step: i, timeout: timeout)
            case let .inject(p): inject(p)
            }
        }
    }
}
