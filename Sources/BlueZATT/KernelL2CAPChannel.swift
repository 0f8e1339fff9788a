// A credit-based channel over the kernel's L2CAP socket on an SPSM (BT_MODE_LE_FLOWCTL
// or BT_MODE_EXT_FLOWCTL): the second backend of `SDUChannel`, beside our own
// `L2CAPChannel`. The kernel cuts SDUs into K-frames, reassembles, and keeps the
// credits; we exchange whole SDUs.
//
// Threads: one reader and one writer per channel, each blocked in the kernel on the
// socket (never on the cooperative pool or an event loop). The reader reads only
// when `sdus` asks for the next SDU, so what the peer sends waits in the kernel's
// socket buffer, whose size the kernel's credits follow: nothing is buffered here.
// The writer takes one SDU at a time from `send` callers, in order; `send` returns
// once the kernel took the SDU (it blocks while the peer has no credits for it).
// `close` shuts the socket down, which wakes both; the last one out releases it.

import Dispatch
import Foundation
import HCI
import L2CAP
import Synchronization
import Transports

public final class KernelL2CAPChannel: SDUChannel, CustomStringConvertible {
    public let socket: KernelL2CAPSocket
    public let spsm: UInt16
    public let mode: KernelChannelMode
    /// The peer's MTU: the largest SDU `send` takes.
    public let maximumSendSize: Int
    /// Our MTU: the largest SDU the peer may send.
    public let receiveMTU: Int
    private let io: IO

    /// Takes over a connected channel socket (from `KernelL2CAPSocket.connect` or `accept`).
    public init(socket: KernelL2CAPSocket, spsm: UInt16, mode: KernelChannelMode) throws {
        self.socket = socket
        self.spsm = spsm
        self.mode = mode
        let mtus = try socket.mtus()
        maximumSendSize = mtus.send
        receiveMTU = mtus.receive
        io = IO(socket: socket, receiveMTU: mtus.receive)
    }

    public var description: String {
        "kernel L2CAP \(mode == .enhanced ? "enhanced " : "")channel SPSM 0x\(hex4(spsm)) to \(socket.peer?.description ?? "?"), MTU \(receiveMTU)/\(maximumSendSize)"
    }

    /// Opens a channel to `peer`'s `spsm` (the kernel creates the LE link as central if
    /// needed). Throws `L2CAPError` (ECONNREFUSED: refused by the peer).
    public static func connect(to peer: BluetoothAddress, type: AddressType, spsm: UInt16, mode: KernelChannelMode = .le,
                               receiveMTU: UInt16 = 2048, securityLevel: UInt8? = nil, from local: BluetoothAddress? = nil) async throws -> KernelL2CAPChannel {
        let s = try await KernelATTChannel.onThread("l2cap-connect") {
            try KernelL2CAPSocket.connect(to: peer, type: type, spsm: spsm, mode: mode, receiveMTU: receiveMTU, securityLevel: securityLevel, from: local)
        }
        return try KernelL2CAPChannel(socket: s, spsm: spsm, mode: mode)
    }

    /// Waits for the next channel a peer opens to `listener`'s SPSM.
    public static func accept(on listener: KernelL2CAPSocket, spsm: UInt16, mode: KernelChannelMode = .le) async throws -> KernelL2CAPChannel {
        let s = try await KernelATTChannel.onThread("l2cap-accept") { try listener.accept() }
        return try KernelL2CAPChannel(socket: s, spsm: spsm, mode: mode)
    }

    /// Dropping the channel closes it (its threads then end).
    deinit { io.close() }

    public func send(_ sdu: [UInt8]) async throws {
        guard sdu.count <= maximumSendSize else { throw L2CAPChannelError.sduTooLong(sdu.count, mtu: maximumSendSize) }
        try await io.write(sdu)
    }

    /// Closes the channel (the kernel sends the Disconnection Request). A `send`
    /// waiting for credits fails; `sdus` ends.
    public func close() async { io.close() }

    /// The SDUs the peer sends, in order. Ends (nil) when either side closes the
    /// channel; throws `L2CAPError` with the kernel's errno when the link is lost.
    public var sdus: SDUs { SDUs(io: io) }

    public struct SDUs: AsyncSequence, Sendable {
        let io: IO
        public func makeAsyncIterator() -> Iterator { Iterator(io: io) }
        public struct Iterator: AsyncIteratorProtocol {
            let io: IO
            public mutating func next() async throws -> [UInt8]? { try await io.read() }
        }
    }

    /// The two threads and what they hand over.
    final class IO: Sendable {
        private struct State {
            var reader: CheckedContinuation<[UInt8]?, any Error>?
            /// The reader has stopped (end of channel, or an error already reported).
            var ended = false
            var writes: [([UInt8], CheckedContinuation<Void, any Error>)] = []
            var closed = false
            var threadsRunning = 2
        }
        private let state = Mutex(State())
        private let readDemand = DispatchSemaphore(value: 0)
        private let writeDemand = DispatchSemaphore(value: 0)
        private let socket: KernelL2CAPSocket

        init(socket: KernelL2CAPSocket, receiveMTU: Int) {
            self.socket = socket
            let reader = Thread { [self] in readLoop(maximum: receiveMTU) }
            reader.name = "l2cap-kernel-read"
            let writer = Thread { [self] in writeLoop() }
            writer.name = "l2cap-kernel-write"
            reader.start()
            writer.start()
        }

        /// One SDU per demand, so nothing waits here that the kernel would not hold.
        private func readLoop(maximum: Int) {
            while true {
                readDemand.wait()
                if state.withLock({ $0.closed && $0.reader == nil }) { break }
                var result = Result { try socket.receiveSDU(maximum: maximum) }
                let ended: Bool
                if case .success(.some) = result { ended = false } else { ended = true }
                let waiter = state.withLock { s -> CheckedContinuation<[UInt8]?, any Error>? in
                    if ended {
                        // After our own close, a read failing on the shut-down socket is an
                        // orderly end; a lost link is reported once, then nil.
                        if s.closed { result = .success(nil) }
                        s.ended = true
                    }
                    return s.reader.take()
                }
                waiter?.resume(with: result)
                if ended { break }
            }
            finished()
        }

        private func writeLoop() {
            while true {
                writeDemand.wait()
                guard let (sdu, c) = state.withLock({ s in s.writes.isEmpty ? nil : s.writes.removeFirst() }) else {
                    if state.withLock({ $0.closed }) { break }
                    continue
                }
                c.resume(with: Result { try socket.send(sdu) })
            }
            finished()
        }

        private func finished() {
            if state.withLock({ $0.threadsRunning -= 1; return $0.threadsRunning == 0 }) { socket.close() }
        }

        func read() async throws -> [UInt8]? {
            try await withCheckedThrowingContinuation { c in
                let done: Result<[UInt8]?, any Error>? = state.withLock { s in
                    if s.ended || s.closed { return .success(nil) }
                    guard s.reader == nil else { return .failure(L2CAPChannelError.closed(.closedLocally)) }
                    s.reader = c
                    return nil
                }
                if let done { c.resume(with: done) } else { readDemand.signal() }
            }
        }

        func write(_ sdu: [UInt8]) async throws {
            try await withCheckedThrowingContinuation { (c: CheckedContinuation<Void, any Error>) in
                let refused = state.withLock { s -> Bool in
                    if s.closed { return true }
                    s.writes.append((sdu, c))
                    return false
                }
                if refused { c.resume(throwing: L2CAPChannelError.closed(.closedLocally)) } else { writeDemand.signal() }
            }
        }

        func close() {
            let pending = state.withLock { s -> [CheckedContinuation<Void, any Error>] in
                guard !s.closed else { return [] }
                s.closed = true
                defer { s.writes.removeAll() }
                return s.writes.map(\.1)
            }
            for c in pending { c.resume(throwing: L2CAPChannelError.closed(.closedLocally)) }
            socket.shutdown()
            readDemand.signal()
            writeDemand.signal()
        }

        deinit { socket.close() }
    }
}
