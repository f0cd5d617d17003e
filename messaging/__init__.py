"""MQTT messaging for every side that talks to the fleet (the device agent, the replayer, the
dashboard's live feed and recorder, local deployments): the paho link (link; messages, errors,
refusals, versions), how a connection is secured (security, tls), private Mosquitto brokers on
loopback (brokers), and the production broker set-up that
`dartfl broker setup` writes (broker_setup, accounts, passwords; the templates in mosquitto/).
What travels over it is `dartfl.protocol`."""
