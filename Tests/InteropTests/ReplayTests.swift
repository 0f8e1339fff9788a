// Replays a session recorded from Rootcanal with `btctl gatt read --name btctl-battery
// --uuid 2A19 --btsnoop Fixtures/rootcanal-gatt-read.btsnoop` (against `btctl gatt
// serve docs/examples/battery.json`) through the scripted transport: the controller's
// frames are injected in recorded order and our stack must send exactly the host
// frames recorded, byte for byte — initialisation, scan by name, connection, MTU
// exchange, full discovery, the read and the disconnection.

import BLETesting
import Foundation
import GAP
import GATT
import HCI
import L2CAP
import Logging
import Snoop
import Testing

struct ReplayTests {
    @Test func gattReadSessionReplaysExactly() async throws {
        let bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: Interop.root + "/Fixtures/rootcanal-gatt-read.btsnoop")))
        let trace = try TraceReader.read(bytes)
        let transport = ScriptedTransport()
        let script = ScriptedTransport.script(from: trace)
        // Generous wall-clock bounds: they only stop a broken test, and with the whole suite
        // sharing two cores (Rootcanal, Bumble and btctl processes starting) a step can wait
        // seconds for a thread; the recording, not the timing, is under test.
        let controller = HCIController(transport: transport, commandTimeout: .seconds(30), logger: Interop.logger)
        // A frame the recording does not have fails the play, and closing the controller
        // fails whatever waits for an answer, so a mismatch ends the test at once.
        let played = Task {
            do { try await transport.play(script, timeout: .seconds(30)) } catch {
                await controller.close()
                throw error
            }
        }

        try await controller.initialize()
        let host = L2CAPHost(controller: controller, logger: Interop.logger)
        await host.start()
        let (address, type) = try await TestCentral.find(name: "btctl-battery", controller: controller, within: .seconds(15))
        let connection = try await TestCentral.connect(to: address, type: type, host: host, within: .seconds(15))
        let client = try await TestCentral.gattClient(on: connection, host: host)
        let all = try await client.discoverAll()
        let level = try #require(all.flatMap(\.1).first { $0.0.uuid == BluetoothUUID(0x2A19) }?.0)
        #expect(try await client.read(level.valueHandle) == [0x64])
        await client.bearer.drain()
        try await controller.send(Disconnect(connectionHandle: connection.handle))

        try await played.value
        #expect(await transport.nextSent(timeout: .milliseconds(100)) == nil, "the stack sent more than the recording")
        await controller.close()
    }
}
