// ATT over the kernel's L2CAP socket (AF_BLUETOOTH, BTPROTO_L2CAP, SOCK_SEQPACKET,
// CID 0x0004): the kernel does HCI and L2CAP, we exchange whole ATT PDUs. The same
// ATTBearer, GATT client and GATT server run over it as over our user-space L2CAP.
// One reader thread per socket blocks in read(2) and hands each PDU to the channel's
// event loop; close() shuts the socket down, which wakes it. Writes are one send(2)
// per PDU, on the loop (a SOCK_SEQPACKET write of one PDU does not block for long).

import ATT
import Foundation
import HCI
import NIOCore
import NIOPosix
import Synchronization
import Transports
#if canImport(Glibc)
import Glibc
#endif

public final class KernelATTChannel: ATTChannel, Sendable {
    public let socket: KernelATTSocket
    /// The loop the bearer over this socket runs on.
    public let loop: any EventLoop
    private let reason = Reason()

    final class Reason: Sendable {
        let value = Mutex<String?>(nil)
        func set(_ r: String) { value.withLock { $0 = $0 ?? r } }
        var current: String? { value.withLock { $0 } }
    }

    /// Takes over a connected socket (from `KernelATTSocket.connect` or `accept`);
    /// `loop` by default one of NIO's shared loops (pass a GATT server's to share it).
    /// The socket is read once the bearer opens the channel (the kernel keeps what
    /// arrives before).
    public init(socket: KernelATTSocket, loop: (any EventLoop)? = nil) {
        self.socket = socket
        self.loop = loop ?? MultiThreadedEventLoopGroup.singleton.next()
    }

    /// Starts the reader thread: each PDU is handed to the loop; the thread stops
    /// reading while 8 PDUs wait there (the kernel's socket buffer, then the peer's
    /// flow control, hold the rest).
    public func open(_ deliver: @escaping @Sendable (ATTChannelInput) -> Void) {
        let socket = self.socket, loop = self.loop, reason = self.reason
        let window = LoopWindow(loop: loop)
        let thread = Thread {
            while true {
                do {
                    guard let pdu = try socket.receive() else {
                        reason.set("the kernel closed the ATT channel")
                        break
                    }
                    window.hand { deliver(.frame(pdu[...])) }
                } catch {
                    reason.set("\(error)")
                    break
                }
            }
            loop.execute { deliver(.closed) }
        }
        thread.name = "att-kernel"
        thread.start()
    }

    public func write(_ pdu: [UInt8], done: (@Sendable (Bool) -> Void)?) -> Bool {
        do { try socket.send(pdu) } catch {
            reason.set("\(error)")
            return false
        }
        done?(true)
        return true
    }

    public var closeReason: String { reason.current ?? "closed" }

    public func close() {
        reason.set("closed by the host")
        socket.close()
    }
}

extension KernelATTChannel {
    /// Runs a blocking socket call on its own thread (never on the cooperative pool,
    /// which a one-CPU machine would stall).
    static func onThread<T: Sendable>(_ name: String, _ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { (c: CheckedContinuation<T, any Error>) in
            let t = Thread { c.resume(with: Result { try body() }) }
            t.name = name
            t.start()
        }
    }

    /// Connects as central to `peer`'s ATT channel; the kernel creates the LE link.
    public static func connect(to peer: BluetoothAddress, type: AddressType, from local: BluetoothAddress? = nil,
                               securityLevel: UInt8? = nil, loop: (any EventLoop)? = nil) async throws -> KernelATTChannel {
        KernelATTChannel(socket: try await onThread("att-connect") {
            try KernelATTSocket.connect(to: peer, type: type, from: local, securityLevel: securityLevel)
        }, loop: loop)
    }

    /// Waits for a central to connect to `listener`.
    public static func accept(on listener: KernelATTSocket, loop: (any EventLoop)? = nil) async throws -> KernelATTChannel {
        KernelATTChannel(socket: try await onThread("att-accept") { try listener.accept() }, loop: loop)
    }
}
