// Hosts on loops of their own beside a virtual radio (`makeController(hostLoop:)`):
// packets cross between each host's thread and the radio's in both directions, and
// nothing may be lost, reordered or left waiting on the way.

import BLE
import BLETesting
import HCI
import NIOCore
import NIOPosix
import Testing
import VirtualHCI

@Suite(.timeLimit(.minutes(3))) struct HostPerCoreTests {
    /// Two bytes counting `i`, for values whose order can be read back.
    static func counted(_ i: Int) -> [UInt8] { [UInt8(i & 0xFF), UInt8(i >> 8)] }

    @Test func hostsOnLoopsOfTheirOwnTalkWholeAndInOrder() async throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 3)
        let loops = Array(group.makeIterator())
        let pair = try await Pair(radio: VirtualRadio(loop: loops[0]), hostLoops: [loops[1], loops[2]])
        #expect(pair.room.central.loop === loops[1])
        #expect(pair.server.loop === loops[2])
        let sink = Characteristic(uuid: uuidB, properties: [.writeWithoutResponse])
        let source = Characteristic(uuid: uuidC, properties: [.read, .notify], value: [0])
        try await pair.server.peripheral.add(Service(uuid: uuidA, characteristics: [sink, source]))
        let remoteSink = try await pair.remote.characteristic(uuidB, in: uuidA)
        let remoteSource = try await pair.remote.characteristic(uuidC, in: uuidA)
        let events = pair.server.peripheral.events()
        let values = try await pair.remote.subscribe(to: remoteSource)
        // Far more than the controllers' 8 buffers each way, both ways at once: Write
        // Commands from the central while the peripheral notifies.
        let n = 600
        async let notified = collect(values, count: n, within: .seconds(30))
        async let written = collect(events.compactMap { e -> [UInt8]? in if case let .written(_, v, _) = e { v } else { nil } },
                                    count: n, within: .seconds(30))
        async let writing: Void = {
            for i in 0..<n { try await pair.remote.write(Self.counted(i), to: remoteSink, withResponse: false) }
        }()
        for i in 0..<n { try await pair.server.peripheral.notify(source, value: Self.counted(i)) }
        try await writing
        #expect(await notified == (0..<n).map(Self.counted))
        #expect(await written == (0..<n).map(Self.counted))
        #expect(values.dropped.count == 0)
        #expect(events.dropped.count == 0)
        // A request and its response cross both ways too.
        #expect(try await pair.remote.read(remoteSource) == Self.counted(n - 1))
        // The link ends on both sides.
        let peripheralSide = pair.server.connectionEvents()
        try await pair.remote.disconnect()
        let ended = await firstElement(peripheralSide.compactMap { e -> HCIStatus? in if case let .disconnected(_, r) = e { r } else { nil } },
                                       within: .seconds(10))
        #expect(ended == .remoteUserTerminatedConnection)
        await pair.room.close()
        try await group.shutdownGracefully()
    }

    @Test func aHostOnAnotherLoopLearnsItsControllerClosed() async throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 2)
        let loops = Array(group.makeIterator())
        let radio = VirtualRadio(loop: loops[0])
        let controller = await radio.makeController(address: BluetoothAddress("C0:00:00:00:00:09")!, hostLoop: loops[1])
        #expect(controller.preferredLoop === loops[1])
        let host = HCIController(transport: controller, logger: Bench.logger)
        #expect(host.loop === loops[1])
        try await host.initialize()
        #expect(try await host.send(ReadBDADDR()).address == controller.address)
        await radio.remove(controller)
        // From the host's thread: refused at once, not queued for a controller that is gone.
        let refused = try await loops[1].submit { () -> Bool in
            do { try controller.sendNow(.command(opcode: .reset, parameters: [])); return false } catch TransportError.closed { return true }
        }.get()
        #expect(refused)
        await #expect(throws: HCIError.self) { try await host.send(ReadBDADDR()) }
        await host.close()
        try await group.shutdownGracefully()
    }

    @Test func aHostGivenALoopOfItsOwnByTheControllerIsHeardToo() async throws {
        // The controller was made for a host on the radio's loop; the host chose another.
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 2)
        let loops = Array(group.makeIterator())
        let radio = VirtualRadio(loop: loops[0])
        let controller = await radio.makeController(address: BluetoothAddress("C0:00:00:00:00:0A")!)
        #expect(controller.preferredLoop === loops[0])
        let host = HCIController(transport: controller, loop: loops[1], logger: Bench.logger)
        try await host.initialize()
        for _ in 0..<20 { #expect(try await host.send(ReadBDADDR()).address == controller.address) }
        await host.close()
        try await group.shutdownGracefully()
    }
}
