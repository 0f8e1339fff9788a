// What a daemon author meets in the first hour: misuse says what to do, the GAP
// Device Name and Appearance are the daemon's own, a host records to a file.

import BLE
import BLETesting
import Foundation
import Testing

@Suite struct DaemonTests {
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
