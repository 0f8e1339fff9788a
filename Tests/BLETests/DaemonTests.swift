// What a daemon author meets in the first hour: misuse says what to do, the GAP
// Device Name and Appearance are the daemon's own, a host records to a file.

import BLE
import GATT
import HCI
import L2CAP
import NIOCore
import BLETesting
import Foundation
import Testing

@Suite(.timeLimit(.minutes(3))) struct DaemonTests {
    @Test func usingAHostBeforeStartSaysToCallStart() async throws {
        let radio = VirtualRadio()
        let host = BluetoothHost(transport: await radio.makeController(address: BluetoothAddress("C0:00:00:00:0D:01")!), logger: Bench.logger)
        do {
            _ = try await host.central.scan()
            Issue.record("scanned before start()")
        } catch {
            #expect("\(error)" == "the host is not started: call start() first")
        }
        try await host.start()
        await host.close()
        do {
            _ = try await host.central.scan()
            Issue.record("scanned after close()")
        } catch {
            #expect("\(error)".hasSuffix("this host cannot be used any more; open a new one"), "\(error)")
        }
    }

    @Test func theDeviceNameAndAppearanceAreTheDaemons() async throws {
        let radio = VirtualRadio()
        let a = BluetoothAddress("C0:00:00:00:0D:02")!, b = BluetoothAddress("C0:00:00:00:0D:03")!
        let central = BluetoothHost(transport: await radio.makeController(address: a), logger: Bench.logger)
        let daemon = BluetoothHost(transport: await radio.makeController(address: b), logger: Bench.logger,
                                   deviceName: "battery-daemon", appearance: 0x0C80)  // category 0x032, Generic Sensor
        try await central.start()
        try await daemon.start()
        defer { Task { await central.close(); await daemon.close() } }
        try await daemon.peripheral.startAdvertising(AdvertisingData())
        let remote = try await central.central.connect(to: b, within: .seconds(5))
        func read(_ uuid: UInt16) async throws -> [UInt8] { try await remote.read(try await remote.characteristic(BluetoothUUID(uuid))) }
        #expect(try await read(0x2A00) == Array("battery-daemon".utf8))
        #expect(try await read(0x2A01) == [0x80, 0x0C])
        let hash = try await read(0x2B2A)
        await daemon.setDeviceName("renamed")
        await daemon.setAppearance(0x03C1)
        #expect(await daemon.deviceName == "renamed")
        #expect(try await read(0x2A00) == Array("renamed".utf8))
        #expect(try await read(0x2A01) == [0xC1, 0x03])
        // Values are not part of the Database Hash: a central's cache stays valid.
        #expect(try await read(0x2B2A) == hash)
        try await remote.disconnect()
    }

    /// The layers hold each other strongly while the transport is open (a weak reference
    /// gives an object a side table and every retain of it the slow path, on every
    /// packet); the transport's end lets go of every hold. A daemon that closes its
    /// hosts keeps nothing of them: controller, L2CAP host, bearers and clients go.
    @Test func aClosedHostKeepsNothingOfItsStack() async throws {
        let radio = VirtualRadio()
        let a = BluetoothAddress("C0:00:00:00:0D:04")!, b = BluetoothAddress("C0:00:00:00:0D:05")!
        weak var host: BluetoothHost?, controller: HCIController?, l2cap: L2CAPHost?
        weak var peerHost: BluetoothHost?, peerController: HCIController?, peerL2CAP: L2CAPHost?, server: GATTServer?
        var loop: (any EventLoop)?
        do {
            let central = BluetoothHost(transport: await radio.makeController(address: a), logger: Bench.logger)
            let peripheral = BluetoothHost(transport: await radio.makeController(address: b), logger: Bench.logger)
            try await central.start()
            try await peripheral.start()
            try await peripheral.peripheral.startAdvertising(AdvertisingData())
            let remote = try await central.central.connect(to: b, within: .seconds(5))
            #expect(try await remote.read(try await remote.characteristic(BluetoothUUID(0x2A00))).isEmpty == false)
            (host, controller, l2cap, loop) = (central, central.controller, central.l2cap, central.loop)
            (peerHost, peerController, peerL2CAP, server) = (peripheral, peripheral.controller, peripheral.l2cap, peripheral.server)
            await central.close()
            await peripheral.close()
        }
        var alive: [String] {
            [("the central's BluetoothHost", host == nil), ("the central's HCIController", controller == nil), ("the central's L2CAPHost", l2cap == nil),
             ("the peripheral's BluetoothHost", peerHost == nil), ("the peripheral's HCIController", peerController == nil),
             ("the peripheral's L2CAPHost", peerL2CAP == nil), ("the peripheral's GATTServer", server == nil)].filter { !$0.1 }.map(\.0)
        }
        // The last references go with the last jobs of close(), on the loop thread, while
        // this test may already run on another: it waits (a bounded number of loop turns)
        // for them, as LoopExecutorTests does. Without the wait, 1 run in 3,000 with both
        // cores busy still saw the central's host, controller and L2CAP host. A leak still
        // fails: it never goes.
        for _ in 0..<1000 where !alive.isEmpty { try await loop?.submit {}.get() }
        #expect(alive.isEmpty, "outlived close(): \(alive)")
    }

    /// A host whose start fails because the transport closed (here a replay that expected
    /// another command) ends as one whose transport closed later: its followers end, and
    /// close() leaves nothing of it. (Its state was set to closed without that, and the
    /// tasks following its streams held it for good.)
    @Test func aHostWhoseStartFoundTheTransportClosedKeepsNothing() async throws {
        weak var gone: BluetoothHost?
        do {
            let trace = ReplayKitTests.trace([(ReadBDADDR().packet, .hostToController)])
            let host = BluetoothHost(transport: ReplayTransport(trace: trace), logger: Bench.logger)
            gone = host
            await #expect(throws: (any Error).self) { try await host.start() }
            guard case .transportClosed = await host.state else {
                Issue.record("state \(await host.state)")
                return
            }
            // Bounded: close() waits for the followers, which used to run for good here.
            let (closed, done) = AsyncStream.makeStream(of: Void.self)
            let closing = Task {
                await host.close()
                done.yield()
            }
            guard await firstElement(closed, within: .seconds(5)) != nil else {
                Issue.record("close() did not return")
                return
            }
            // Once it has ended, the task no longer holds the host.
            await closing.value
        }
        #expect(gone == nil, "the host outlived close()")
    }

    /// The DocC tutorial shows the example package as it is: each file's last step is a
    /// link to the example's file (built and tested by the test command), and the earlier
    /// steps are that file cut short, not another program.
    @Test func theTutorialShowsTheExamplePackage() throws {
        let resources = Bench.root + "/Sources/BLE/BLE.docc/Resources/", example = Bench.root + "/Examples/BatteryDaemon/"
        for (shown, file) in [("battery-package.swift", "Package.swift"), ("battery-kit-02.swift", "Sources/BatteryKit/Battery.swift"),
                              ("battery-daemon-main.swift", "Sources/battery-daemon/main.swift"),
                              ("battery-replay-02.swift", "Tests/BatteryKitTests/ReplayTests.swift")] {
            let target = try FileManager.default.destinationOfSymbolicLink(atPath: resources + shown)
            #expect(URL(fileURLWithPath: resources + target).standardizedFileURL.path == URL(fileURLWithPath: example + file).standardizedFileURL.path,
                    "\(shown) must link to Examples/BatteryDaemon/\(file)")
        }
        func read(_ path: String) throws -> String { try String(contentsOfFile: path, encoding: .utf8) }
        // The first monitor: the service and the monitor up to the read, then it disconnects.
        let kit = try read(example + "Sources/BatteryKit/Battery.swift"), kit1 = try read(resources + "battery-kit-01.swift")
        let monitor = try #require(kit1.range(of: "public struct BatteryMonitor"))
        let upToRead = try #require(kit1.range(of: "        try await peripheral.disconnect()"))
        #expect(kit.hasPrefix(String(kit1[..<kit1.range(of: "public struct")!.lowerBound])))
        #expect(kit.contains(String(kit1[monitor.lowerBound..<upToRead.lowerBound])))
        // The first test file: the replay test alone.
        let tests = try read(example + "Tests/BatteryKitTests/ReplayTests.swift"), tests1 = try read(resources + "battery-replay-01.swift")
        #expect(tests.hasPrefix(String(tests1.dropLast(2))))
    }
}
