// Signed Write Commands at the server (Vol 3, Part F, §3.4.5.4; Part C, §10.4.2):
// verified with the client's CSRK, never twice with one SignCounter, written only
// where the characteristic allows signed writes and its permissions accept what the
// signature proves. The signing itself is checked against BlueZ's vectors in
// ToolboxTests.

import ATT
import BLECrypto
import HCI
import Testing
@testable import GATT

@Suite(.timeLimit(.minutes(3)))
struct SignedWriteTests {
    static let csrk: [UInt8] = [0x50, 0x5E, 0x42, 0xDF, 0x96, 0x91, 0xEC, 0x72, 0xD3, 0x1F, 0xCD, 0xFB, 0xEB, 0x64, 0x1B, 0x61]

    /// One service: a characteristic that takes signed writes, one that needs an
    /// authenticated write and takes signed writes, and a plain writable one.
    static func make() throws -> (GATTServerState, signed: UInt16, authenticated: UInt16, plain: UInt16) {
        var db = AttributeDatabase()
        let s = try db.add(GATTService(uuid: BluetoothUUID(0x1815), characteristics: [
            GATTCharacteristic(uuid: BluetoothUUID(0x2A56), properties: [.writeWithoutResponse, .authenticatedSignedWrites], value: [0]),
            GATTCharacteristic(uuid: BluetoothUUID(0x2A57), properties: [.authenticatedSignedWrites], permissions: [.writeAuthenticated], value: [0]),
            GATTCharacteristic(uuid: BluetoothUUID(0x2A58), properties: [.write, .writeWithoutResponse], value: [0]),
        ]))
        return (GATTServerState(database: db), s.characteristicValues[0], s.characteristicValues[1], s.characteristicValues[2])
    }

    static func signed(_ handle: UInt16, _ value: [UInt8], counter: UInt32, key: [UInt8] = csrk) throws -> ATTPDU {
        let message = [0xD2, UInt8(handle & 0xFF), UInt8(handle >> 8)] + value
        return .signedWriteCommand(handle: handle, value: value, signature: try SecurityToolbox.signature(csrk: key, message: message, counter: counter))
    }

    @Test func aVerifiedSignedWriteIsWrittenAndItsCounterReported() throws {
        var (s, signed, _, _) = try Self.make()
        s.setSigningKey(SigningKey(csrk: Self.csrk, security: LinkSecurity(encrypted: true)), connection: 1)
        let (response, effects) = s.handle(try Self.signed(signed, [0x13, 0x37], counter: 0), connection: 1, mtu: 23)
        #expect(response == nil)
        #expect(effects == [.signCounter(connection: 1, counter: 0), .written(handle: signed, value: [0x13, 0x37], connection: 1)])
        #expect(s.database.attribute(signed)?.value == [0x13, 0x37])
        #expect(s.signingKey(connection: 1)?.counter == 0)
        // Counters may skip (a write the server never saw), not go back.
        #expect(s.handle(try Self.signed(signed, [7], counter: 5), connection: 1, mtu: 23).effects.count == 2)
        #expect(s.signingKey(connection: 1)?.counter == 5)
    }

    @Test func replaysForgeriesAndUnknownClientsAreIgnored() throws {
        var (s, signed, _, _) = try Self.make()
        s.setSigningKey(SigningKey(csrk: Self.csrk, counter: 3, security: LinkSecurity(encrypted: true)), connection: 1)
        // The stored counter, and one below it: replays.
        #expect(s.handle(try Self.signed(signed, [1], counter: 3), connection: 1, mtu: 23).effects.isEmpty)
        #expect(s.handle(try Self.signed(signed, [1], counter: 2), connection: 1, mtu: 23).effects.isEmpty)
        // Another key, a changed value under a good signature, a changed handle.
        var other = Self.csrk
        other[15] ^= 1
        #expect(s.handle(try Self.signed(signed, [1], counter: 4, key: other), connection: 1, mtu: 23).effects.isEmpty)
        guard case let .signedWriteCommand(h, _, signature) = try Self.signed(signed, [1], counter: 4) else { return }
        #expect(s.handle(.signedWriteCommand(handle: h, value: [2], signature: signature), connection: 1, mtu: 23).effects.isEmpty)
        #expect(s.handle(.signedWriteCommand(handle: h + 1, value: [1], signature: signature), connection: 1, mtu: 23).effects.isEmpty)
        // A connection without a key, and one whose key was cleared.
        #expect(s.handle(try Self.signed(signed, [1], counter: 4), connection: 2, mtu: 23).effects.isEmpty)
        #expect(s.database.attribute(signed)?.value == [0])
        #expect(s.signingKey(connection: 1)?.counter == 3)
        // The genuine one still goes through, once.
        #expect(s.handle(.signedWriteCommand(handle: h, value: [1], signature: signature), connection: 1, mtu: 23).effects.count == 2)
        #expect(s.handle(.signedWriteCommand(handle: h, value: [1], signature: signature), connection: 1, mtu: 23).effects.isEmpty)
        s.disconnected(1)
        #expect(s.signingKey(connection: 1) == nil)
    }

    /// The signature proves what the pairing that distributed the key proved; a
    /// characteristic without the Authenticated Signed Writes property takes none, and
    /// the counter is spent either way.
    @Test func permissionsAndPropertiesAreChecked() throws {
        var (s, _, authenticated, plain) = try Self.make()
        s.setSigningKey(SigningKey(csrk: Self.csrk, security: LinkSecurity(encrypted: true, authenticated: false)), connection: 1)
        #expect(s.handle(try Self.signed(authenticated, [9], counter: 0), connection: 1, mtu: 23).effects == [.signCounter(connection: 1, counter: 0)])
        #expect(s.handle(try Self.signed(plain, [9], counter: 1), connection: 1, mtu: 23).effects == [.signCounter(connection: 1, counter: 1)])
        #expect(s.database.attribute(authenticated)?.value == [0] && s.database.attribute(plain)?.value == [0])
        // An authenticated key, or an authenticated encrypted link under an unauthenticated key.
        s.setSigningKey(SigningKey(csrk: Self.csrk, counter: 1, security: LinkSecurity(encrypted: true, authenticated: true)), connection: 1)
        #expect(s.handle(try Self.signed(authenticated, [9], counter: 2), connection: 1, mtu: 23).effects.count == 2)
        s.setSigningKey(SigningKey(csrk: Self.csrk, security: LinkSecurity(encrypted: true)), connection: 2)
        #expect(s.handle(try Self.signed(authenticated, [8], counter: 0), connection: 2, mtu: 23,
                         security: LinkSecurity(encrypted: true, authenticated: true)).effects.count == 2)
        #expect(s.database.attribute(authenticated)?.value == [8])
    }

    /// The server's answer to what a peer sends: a Signed Write Command that is too
    /// short to hold a signature is malformed at the ATT layer, never a crash.
    @Test func aTruncatedSignedWriteDoesNotDecode() {
        #expect(throws: (any Error).self) { try ATTPDU(bytes: [0xD2, 0x12, 0x00, 1, 2, 3]) }
    }
}
