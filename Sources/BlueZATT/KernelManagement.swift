// The kernel's Bluetooth management interface (the mgmt API of doc/mgmt-api.txt that
// bluetoothd and btmgmt speak), on an HCI socket bound to the control channel. With it
// a program sets what the kernel's own Security Manager uses on an adapter the kernel
// drives (IO capability, bondable, Secure Connections) and acts as the user agent the
// kernel asks during pairing (confirm, passkey). Our tests use it to pair our stack
// with the kernel's SMP; nothing in our stack needs it for its own adapters.
//
// One reader thread per instance reads the socket (polling, so `close` or dropping the
// instance ends it within 100 ms); a command's Command Complete or Command Status goes to the caller waiting
// for that opcode on that index, every other event to `events`.

import Foundation
import HCI
import Synchronization
import Transports
import CBlueZ

/// A refused management command: the kernel's status (Rejected, Not Supported, ...).
public struct ManagementError: Error, Equatable, Sendable, CustomStringConvertible {
    public var opcode: UInt16
    public var status: UInt8
    public var description: String {
        let names = ["success", "unknown command", "not connected", "failed", "connect failed", "authentication failed", "not paired",
                     "no resources", "timeout", "already connected", "busy", "rejected", "not supported", "invalid parameters",
                     "disconnected", "not powered", "cancelled", "invalid index", "blocked through rfkill", "already paired",
                     "permission denied"]
        let name = Int(status) < names.count ? names[Int(status)] : "status 0x\(hex2(status))"
        return "management command 0x\(hex4(opcode)) refused: \(name)"
    }
}

public final class KernelManagement: Sendable {
    /// One management event: its code, the adapter index it is about, its parameters.
    public struct Event: Sendable, Equatable {
        public var code: UInt16
        public var index: UInt16
        public var parameters: [UInt8]

        /// The peer address and mgmt address type (1 LE public, 2 LE random) the
        /// pairing events start with.
        public var address: (BluetoothAddress, UInt8)? {
            guard parameters.count >= 7, let a = try? BluetoothAddress(wireBytes: Array(parameters[0..<6])) else { return nil }
            return (a, parameters[6])
        }
    }

    /// Commands (mgmt-api.txt).
    public enum Opcode {
        public static let setPowered: UInt16 = 0x0005
        public static let setConnectable: UInt16 = 0x0007
        public static let setBondable: UInt16 = 0x0009
        public static let loadLongTermKeys: UInt16 = 0x0013
        public static let setIOCapability: UInt16 = 0x0018
        public static let unpairDevice: UInt16 = 0x001B
        public static let userConfirmReply: UInt16 = 0x001C
        public static let userConfirmNegativeReply: UInt16 = 0x001D
        public static let userPasskeyReply: UInt16 = 0x001E
        public static let userPasskeyNegativeReply: UInt16 = 0x001F
        public static let setAdvertising: UInt16 = 0x0029
        public static let setSecureConnections: UInt16 = 0x002D
        public static let loadIdentityResolvingKeys: UInt16 = 0x0030
    }

    /// Events (mgmt-api.txt).
    public enum EventCode {
        public static let commandComplete: UInt16 = 0x0001
        public static let commandStatus: UInt16 = 0x0002
        public static let newLongTermKey: UInt16 = 0x000A
        public static let deviceConnected: UInt16 = 0x000B
        public static let deviceDisconnected: UInt16 = 0x000C
        public static let userConfirmRequest: UInt16 = 0x000F
        public static let userPasskeyRequest: UInt16 = 0x0010
        public static let authenticationFailed: UInt16 = 0x0011
        public static let passkeyNotify: UInt16 = 0x0017
        public static let newIdentityResolvingKey: UInt16 = 0x0018
    }

    /// The socket and what the reader thread shares with callers. The thread holds
    /// this, not the `KernelManagement`, so dropping that closes the socket.
    private final class Reader: Sendable {
        struct State {
            var replies: [UInt32: CheckedContinuation<[UInt8], any Error>] = [:]
            var closed = false
        }
        let fd: Int32
        let state = Mutex(State())
        let continuation: BufferedStream<Event>.Continuation

        init(fd: Int32, continuation: BufferedStream<Event>.Continuation) {
            self.fd = fd
            self.continuation = continuation
        }

        func run() {
            var buffer = [UInt8](repeating: 0, count: 1024)
            while !state.withLock({ $0.closed }) {
                var p = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
                guard poll(&p, 1, 100) > 0 else { continue }
                let n = buffer.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
                if n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN) { break }
                guard n >= 6 else { continue }
                var r = ByteReader(Array(buffer[0..<n]))
                guard let code = try? r.readUInt16("opcode"), let index = try? r.readUInt16("index"),
                      let length = try? r.readUInt16("length"), let parameters = try? r.readBytes(Int(length), "parameters") else { continue }
                if code == EventCode.commandComplete || code == EventCode.commandStatus {
                    var p = ByteReader(parameters)
                    guard let opcode = try? p.readUInt16("opcode"), let status = try? p.readUInt8("status") else { continue }
                    let waiter = state.withLock { $0.replies.removeValue(forKey: KernelManagement.key(opcode, index)) }
                    if status != 0 {
                        waiter?.resume(throwing: ManagementError(opcode: opcode, status: status))
                    } else {
                        waiter?.resume(returning: code == EventCode.commandComplete ? Array(parameters.dropFirst(3)) : [])
                    }
                } else {
                    continuation.yield(Event(code: code, index: index, parameters: parameters))
                }
            }
            let waiters = state.withLock { s in
                s.closed = true
                defer { s.replies.removeAll() }
                return Array(s.replies.values)
            }
            for w in waiters { w.resume(throwing: ManagementError(opcode: 0, status: 0x0e)) }
            continuation.finish()
            Glibc.close(fd)
        }
    }
    private let reader: Reader

    /// Every event that is not a command's reply, in order. Buffers the oldest 256 not
    /// yet read; later ones are dropped and counted in `droppedEvents`.
    public let events: BufferedStream<Event>
    public var droppedEvents: Int { events.dropped.count }

    /// Opens the control channel (needs CAP_NET_ADMIN for most commands). `close()`,
    /// or dropping the value, closes it.
    public init() throws {
        let fd = cbluez_hci_socket()
        guard fd >= 0 else { throw BlueZError(operation: "socket(AF_BLUETOOTH, BTPROTO_HCI)", errno: errno) }
        guard cbluez_hci_bind(fd, UInt16(CBLUEZ_HCI_DEV_NONE), 3) == 0 else {
            let e = errno
            Glibc.close(fd)
            throw BlueZError(operation: "binding the management channel (HCI_CHANNEL_CONTROL)", errno: e)
        }
        let (events, continuation) = BufferedStream<Event>.makeStream(capacity: 256, keeping: .oldest)
        self.events = events
        let reader = Reader(fd: fd, continuation: continuation)
        self.reader = reader
        let thread = Thread { reader.run() }
        thread.name = "mgmt-read"
        thread.start()
    }

    fileprivate static func key(_ opcode: UInt16, _ index: UInt16) -> UInt32 { UInt32(opcode) << 16 | UInt32(index) }

    /// Sends a command to adapter `index` and returns its reply's parameters; throws
    /// `ManagementError` with the kernel's status, or after `timeout` without a reply.
    @discardableResult
    public func command(_ opcode: UInt16, index: UInt16, _ parameters: [UInt8] = [], timeout: Duration = .seconds(5)) async throws -> [UInt8] {
        let key = Self.key(opcode, index), reader = self.reader
        let deadline = Task {
            try await Task.sleep(for: timeout)
            reader.state.withLock { $0.replies.removeValue(forKey: key) }?.resume(throwing: ManagementError(opcode: opcode, status: 0x08))
        }
        defer { deadline.cancel() }
        return try await withCheckedThrowingContinuation { c in
            let busy = reader.state.withLock { s -> Bool in
                if s.closed || s.replies[key] != nil { return true }
                s.replies[key] = c
                return false
            }
            if busy { c.resume(throwing: ManagementError(opcode: opcode, status: 0x0a)); return }
            var w = ByteWriter()
            w.write(opcode); w.write(index); w.write(UInt16(parameters.count)); w.write(contentsOf: parameters)
            let packet = w.bytes
            let n = packet.withUnsafeBytes { Glibc.write(reader.fd, $0.baseAddress, $0.count) }
            if n != packet.count {
                reader.state.withLock { $0.replies.removeValue(forKey: key) }?.resume(throwing: BlueZError(operation: "writing a management command", errno: errno))
            }
        }
    }

    /// Ends the reader thread (within 100 ms) and releases the socket; `events` finishes.
    public func close() { reader.state.withLock { $0.closed = true } }

    deinit { close() }

    // MARK: The commands the pairing tests use

    public func setPowered(_ on: Bool, index: UInt16) async throws { try await command(Opcode.setPowered, index: index, [on ? 1 : 0]) }
    public func setBondable(_ on: Bool, index: UInt16) async throws { try await command(Opcode.setBondable, index: index, [on ? 1 : 0]) }
    /// 0 off, 1 on, 2 Secure Connections Only.
    public func setSecureConnections(_ mode: UInt8, index: UInt16) async throws { try await command(Opcode.setSecureConnections, index: index, [mode]) }
    public func setIOCapability(_ capability: UInt8, index: UInt16) async throws { try await command(Opcode.setIOCapability, index: index, [capability]) }
    /// Forgets every LTK and IRK the kernel holds for the adapter.
    public func clearKeys(index: UInt16) async throws {
        try await command(Opcode.loadLongTermKeys, index: index, [0, 0])
        try await command(Opcode.loadIdentityResolvingKeys, index: index, [0, 0])
    }

    /// Answers a User Confirmation Request.
    public func confirm(_ accept: Bool, address: BluetoothAddress, type: UInt8, index: UInt16) async throws {
        try await command(accept ? Opcode.userConfirmReply : Opcode.userConfirmNegativeReply, index: index, address.bytes + [type])
    }

    /// Answers a User Passkey Request (nil: refuse).
    public func passkey(_ value: UInt32?, address: BluetoothAddress, type: UInt8, index: UInt16) async throws {
        if let value {
            var w = ByteWriter()
            w.write(contentsOf: address.bytes); w.write(type); w.write(value)
            try await command(Opcode.userPasskeyReply, index: index, w.bytes)
        } else {
            try await command(Opcode.userPasskeyNegativeReply, index: index, address.bytes + [type])
        }
    }
}
