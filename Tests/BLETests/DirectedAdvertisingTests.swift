// Directed advertising (`startAdvertising(directedTo:)`): connectable advertising for
// one device alone. ADV_DIRECT_IND carries no data; with the extended commands data
// goes out in extended PDUs with TargetA; high duty cycle lasts 1.28 s at most and ends
// with an LE Connection Complete of Advertising Timeout (legacy) or an LE Advertising
// Set Terminated (extended), which must never end a connection attempt of the same
// host. On the virtual radio, both command sets, and on Rootcanal.

import BLE
import BLETesting
import Foundation
import GAP
@testable import HCI
import NIOEmbedded
import Testing

@Suite(.timeLimit(.minutes(3))) struct DirectedAdvertisingTests {
    /// What `host` hears from `address` in 300 ms of scanning.
    static func heard(from address: BluetoothAddress, by host: BluetoothHost) async throws -> [Advertisement] {
        try await host.central.scan(for: .milliseconds(300)).filter { $0.address == address }.map(\.advertisement)
    }

    /// The room's central is the target; the second peripheral scans as a bystander.
    /// The target hears a directed, connectable advertisement (with its data when
    /// extended PDUs carry it) and connects; the bystander hears nothing. Once the link
    /// ends the advertisement resumes, still for the target alone.
    @Test(arguments: [false, true]) func aDirectedAdvertisementIsForItsTargetAlone(extended: Bool) async throws {
        let room = try await Room(peripherals: 2, extendedAdvertising: extended)
        defer { Task { await room.close() } }
        let (p, bystander) = (room.peripherals[0], room.peripherals[1])
        let target = DirectedTarget(address: BluetoothAddress("C0:00:00:00:00:01")!)
        var named = AdvertisingData()
        named.localName = "directed"
        // ADV_DIRECT_IND carries no data: with the legacy commands, data is refused.
        if !extended {
            await #expect { try await p.peripheral.startAdvertising(named, directedTo: target) } throws: { error in
                guard case let BLEError.notSupported(why) = error else { return false }
                return why.contains("carries none")
            }
        }
        try await p.peripheral.startAdvertising(extended ? named : AdvertisingData(), directedTo: target)
        let heard = try await Self.heard(from: room.addresses[0], by: room.central)
        #expect(!heard.isEmpty && heard.allSatisfy { $0.isDirected && $0.isConnectable }, "\(heard)")
        #expect(heard.first?.data.localName == (extended ? "directed" : nil))
        #expect(try await Self.heard(from: room.addresses[0], by: bystander).isEmpty)
        let remote = try await room.central.central.connect(to: room.addresses[0], within: .seconds(5))
        try await remote.disconnect()
        _ = await remote.disconnection(within: .seconds(5))
        let again = try await Self.heard(from: room.addresses[0], by: room.central)
        #expect(!again.isEmpty && again.allSatisfy(\.isDirected), "\(again)")
        #expect(try await Self.heard(from: room.addresses[0], by: bystander).isEmpty)
    }

    /// High duty cycle directed advertising to a device that is not there ends after
    /// 1.28 s with `.advertisingEnded(.durationElapsed)`. The controller's LE Connection
    /// Complete of Advertising Timeout does not end the connection attempt the same
    /// host has under way (it times out on its own limit).
    @Test(arguments: [false, true]) func aHighDutyCycleAdvertisementNobodyAnswersEnds(extended: Bool) async throws {
        let loop = NIOAsyncTestingEventLoop()
        let room = try await Room(peripherals: 1, radio: VirtualRadio(loop: loop), extendedAdvertising: extended)
        defer { Task { await room.close() } }
        let p = room.peripherals[0]
        let events = p.peripheral.events()
        let absent = BluetoothAddress("C0:00:00:00:0F:0F")!
        try await p.peripheral.startAdvertising(AdvertisingData(), directedTo: DirectedTarget(address: absent, highDutyCycle: true))
        let attempt = Task { try await p.central.connect(to: BluetoothAddress("C0:00:00:00:0F:0E")!, within: .seconds(3)) }
        // Not before 1.28 s of the loop's time, and then at once: the controller's
        // report and the host's, on the loop, within the advance.
        await loop.advanceTime(by: .milliseconds(1_270))
        #expect(AdvertisingLimitsTests.ends(events.takeBuffered()).isEmpty)
        await loop.advanceTime(by: .milliseconds(10))
        let end = try #require(AdvertisingLimitsTests.ends(events.takeBuffered()).first)
        #expect(end.0.handle == 0 && end.1 == .durationElapsed)
        // The connection attempt goes on to its own limit (3 s from when it armed its
        // timer, which the test cannot see: time moves on until it ends).
        #expect(await throwsWithin(.milliseconds(300)) { _ = try await attempt.value } == false)
        await #expect { try await loop.advancing { _ = try await attempt.value } } throws: { error in
            guard case BLEError.connectionTimeout = error else { return false }
            return true
        }
    }

    /// What directed advertising cannot be is refused before anything is sent.
    @Test func whatDirectedAdvertisingCannotBeIsRefused() async throws {
        let room = try await Room(peripherals: 1, extendedAdvertising: true)
        defer { Task { await room.close() } }
        let p = room.peripherals[0].peripheral
        let low = DirectedTarget(address: room.addresses[0]), high = DirectedTarget(address: room.addresses[0], highDutyCycle: true)
        var named = AdvertisingData()
        named.localName = "x"
        let cases: [(String, () async throws -> Void)] = [
            ("connectable", { try await p.startAdvertising(AdvertisingData(), connectable: false, directedTo: low) }),
            ("no scan response", { try await p.startAdvertising(AdvertisingData(), scanResponse: named, directedTo: low) }),
            ("carries no data", { try await p.startAdvertising(named, directedTo: high) }),
            ("carries no data", { try await p.startAdvertising(AdvertisingData(), phys: .longRange, directedTo: high) }),
            ("1.28 s at most", { try await p.startAdvertising(AdvertisingData(), duration: .seconds(2), directedTo: high) }),
        ]
        for (says, attempt) in cases {
            await #expect(throws: BLEError.self, "\(says)") { try await attempt() }
            do { try await attempt() } catch let BLEError.invalidArgument(why) { #expect(why.contains(says), "\(why)") } catch { Issue.record("\(error)") }
        }
        #expect(try await Self.heard(from: room.addresses[0], by: room.central).isEmpty)
    }

    /// On Rootcanal: our peripheral, advertising a name until then, directs its
    /// advertisement to our central host's address; the central hears it as directed (ADV_DIRECT_IND with the legacy PDUs
    /// Rootcanal's controller sends) and connects. Then high duty cycle to an absent
    /// device ends by itself (Rootcanal sends LE Connection Complete with Advertising
    /// Timeout and LE Advertising Set Terminated).
    @Test func onRootcanalADirectedAdvertisementConnectsItsTarget() async throws {
        guard let rc = try await Bench.rootcanalHosts(2) else { return }
        defer { rc.stop() }
        let (p, c) = (rc.hosts[0], rc.hosts[1])
        let (pAddress, cAddress) = (rc.addresses[0], rc.addresses[1])
        let events = p.peripheral.events()
        // Set 0 holds a name first: Rootcanal refuses directed parameters for a set with data.
        var named = AdvertisingData()
        named.localName = "undirected"
        try await p.peripheral.startAdvertising(named)
        try await p.peripheral.startAdvertising(AdvertisingData(), directedTo: DirectedTarget(address: cAddress))
        let heard = try await Self.heard(from: pAddress, by: c)
        #expect(!heard.isEmpty && heard.allSatisfy { $0.isDirected && $0.isConnectable }, "\(heard)")
        let remote = try await c.central.connect(to: pAddress, within: .seconds(10))
        try await remote.disconnect()
        _ = await remote.disconnection(within: .seconds(5))
        try await p.peripheral.startAdvertising(AdvertisingData(), directedTo: DirectedTarget(address: BluetoothAddress("C0:00:00:00:0F:0F")!, highDutyCycle: true))
        let end = try #require(await AdvertisingLimitsTests.ended(events))
        #expect(end.0.handle == 0 && end.1 == .durationElapsed)
    }
}
